// Scheduling must not change numerics: with priority scheduling (including preemptions) and
// predictive batching on, every request's greedy tokens equal the baseline's.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine_test_util.h"
#include "optim/sched_harness.h"

namespace optimate::testing {
namespace {

struct Arrival {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
  int64_t priority = 0;
  int64_t arrival_ms = 0;
};

std::vector<Arrival> mixed_arrivals() {
  std::mt19937 rng(77);
  std::vector<Arrival> out;
  int64_t t = 0;
  for (int i = 0; i < 40; ++i) {
    Arrival a;
    a.id = "r" + std::to_string(i);
    const int len = 3 + static_cast<int>(rng() % 90);
    for (int k = 0; k < len; ++k) a.prompt.push_back(2 + static_cast<int32_t>(rng() % 60));
    a.params.temperature = 0.0f;
    a.params.max_tokens = 4 + static_cast<int64_t>(rng() % 28);
    a.priority = static_cast<int64_t>(rng() % 4);
    t += static_cast<int64_t>(rng() % 12);  // bursts and gaps
    a.arrival_ms = t;
    out.push_back(std::move(a));
  }
  return out;
}

// Steps the engine on a fake clock (5 ms per step), adding each request at its time.
Results run(FakeEngineOptions options, const std::vector<Arrival>& arrivals, Engine** out_engine = nullptr) {
  auto clock = std::make_shared<FakeClock>();
  Engine engine = make_fake_engine(options, clock);
  Results results;
  size_t next = 0;
  for (int64_t i = 0; i < 100000 && (next < arrivals.size() || engine.has_unfinished()); ++i) {
    while (next < arrivals.size() && clock->now_ns() >= arrivals[next].arrival_ms * 1'000'000) {
      const Arrival& a = arrivals[next++];
      RequestMetadata meta;
      meta.priority = EnginePriority{a.priority};
      engine.add_request(a.id, a.prompt, a.params, meta);
    }
    collect(engine.step(), results);
    clock->advance_ms(5);
  }
  if (out_engine) *out_engine = nullptr;
  EXPECT_EQ(engine.scheduler().kv().pool().num_free_blocks(), options.num_blocks);
  double preemptions = 0;
  for (const auto& c : engine.optimizer_counters())
    for (const auto& v : c.counters)
      if (v.name.rfind("preemptions_for_", 0) == 0) preemptions += v.value;
  results[{"#priority-preemptions", 0}].tokens.push_back(static_cast<int32_t>(preemptions));
  results[{"#preemptions", 0}].tokens.push_back(static_cast<int32_t>(engine.scheduler().stats().num_preemptions));
  return results;
}

TEST(SchedulingNumerics, GreedyTokensEqualTheBaselines) {
  const auto arrivals = mixed_arrivals();
  FakeEngineOptions tight;
  tight.num_blocks = 80;  // 320 token slots for up to ~120 tokens each: preemption on KV
  tight.max_num_seqs = 6; // and on sequence slots

  Results alone;
  for (const Arrival& a : arrivals) {
    Engine engine = make_fake_engine();
    engine.add_request(a.id, a.prompt, a.params);
    for (auto& [key, r] : run_to_completion(engine)) alone[key] = r;
  }
  const Results baseline = run(tight, arrivals);
  FakeEngineOptions optimized = tight;
  optimized.optimizers = {{"priority", {{"min_run_ms", 20.0}, {"preempt_after_ms", 0.0}}}, {"predictive", {{"max_wait_ms", 20.0}}}};
  const Results with_optimizers = run(optimized, arrivals);

  EXPECT_GT(with_optimizers.at({"#priority-preemptions", 0}).tokens[0], 0);
  EXPECT_GT(baseline.at({"#preemptions", 0}).tokens[0], 0);
  for (const Arrival& a : arrivals) {
    const SeqResult& ref = alone.at({a.id, 0});
    EXPECT_EQ(baseline.at({a.id, 0}).tokens, ref.tokens) << a.id;
    const SeqResult& opt = with_optimizers.at({a.id, 0});
    EXPECT_EQ(opt.tokens, ref.tokens) << a.id;
    EXPECT_EQ(opt.reason, ref.reason) << a.id;
    EXPECT_EQ(opt.num_finished, 1) << a.id;
  }
}

}  // namespace
}  // namespace optimate::testing
