// Swap costs in the simulated backend, and the multi-turn workload: copies to and from host
// memory take bytes / host-link bandwidth on a copy engine of their own and hold back only the
// steps that touch their blocks; a long-context load that forces preemption completes under
// every preemption mode; conversations resend a growing history, each turn sent its think time
// after the previous one finished.
#include <gtest/gtest.h>

#include "bench/bench_target.h"
#include "bench/cost_model.h"
#include "bench/in_process.h"
#include "bench/sim_runner.h"
#include "bench/summary.h"
#include "bench/workload_toml.h"
#include "core/error.h"

namespace optimate::bench {
namespace {

const std::string kProfile = std::string(OPTIMATE_TEST_DATA_DIR) + "/../../profiles/h200-llama3-8b.json";

TEST(SimSwap, CopiesTakeTheirTimeAndHoldBackOnlyStepsThatNeedThem) {
  auto clock = std::make_shared<FakeClock>();
  const CostProfile profile = load_cost_profile(kProfile);
  SimModelRunner runner(profile, clock, 50, kv::HostTierSlots{.swap = 1024});
  ASSERT_GT(runner.host_link_bytes_per_s(), 0.0);
  // 512 blocks of 16 tokens of Llama-3-8B: 1 GiB, longer than a decode step.
  std::vector<kv::KvCopy> copies;
  for (int32_t b = 0; b < 512; ++b) copies.push_back({kv::CopyDirection::kToDevice, b, b, 1});
  const double copy_s = 512.0 * 16 * 131072 / profile.host_link_bytes_per_s;
  const std::vector<int32_t> token = {7}, far = {1000}, near = {5};
  std::vector<float> logits;
  const CostModel& cost = runner.cost_model();

  runner.copy_kv(copies);
  const int64_t t0 = clock->now_ns();
  runner.forward({{SeqSlice{token, 0, far, true}}}, logits);  // block 1000: not copied, no wait
  EXPECT_EQ(clock->now_ns() - t0, std::llround(cost.step_cost({{1, 0}}).seconds * 1e9));
  EXPECT_EQ(runner.copy_wait_s(), 0.0);
  const int64_t t1 = clock->now_ns();
  runner.forward({{SeqSlice{token, 0, near, true}}}, logits);  // block 5: waits for the copies
  EXPECT_NEAR(static_cast<double>(clock->now_ns() - t0) * 1e-9, copy_s + cost.step_cost({{1, 0}}).seconds, 1e-6);
  EXPECT_GT(clock->now_ns() - t1, std::llround(cost.step_cost({{1, 0}}).seconds * 1e9));
  EXPECT_NEAR(runner.copy_wait_s(), copy_s - cost.step_cost({{1, 0}}).seconds, 1e-6);
  EXPECT_THROW(runner.copy_kv(std::vector<kv::KvCopy>{{kv::CopyDirection::kToHost, 0, 1024, 1}}), Error);
}

// Prompts of 4k-16k tokens and outputs of 512-2k, a KV pool of 4096 blocks (64k tokens): the
// running requests outgrow the pool and preempt.
Workload long_context() {
  WorkloadSpec spec;
  spec.name = "long";
  spec.seed = 3;
  spec.num_requests = 24;
  spec.arrival = {.kind = ArrivalKind::kPoisson, .rate_per_s = 2.0};
  spec.prompt = {.kind = LengthKind::kUniform, .min = 4096, .max = 16384};
  spec.output = {.kind = LengthKind::kUniform, .min = 512, .max = 2048};
  spec.token_id_max = 4000;
  return build_workload(spec);
}

RunResult simulate(const Workload& w, const std::string& mode, bool prefix_caching = true) {
  EngineConfig config;
  config.enable_prefix_caching = prefix_caching;
  config.max_num_seqs = 64;
  config.max_num_batched_tokens = 8192;
  config.max_model_len = 20000;
  config.preemption_mode = parse_choice<PreemptionMode>(mode, "preemption_mode");
  config.swap_space = 64;
  CostProfile profile = load_cost_profile(kProfile);
  profile.num_kv_blocks = 4096;
  profile.model.max_position_embeddings = 20000;
  BuiltEngine target = build_sim_engine(config, profile, w.spec.token_id_max + 1);
  return run_in_process(target, w);
}

TEST(SimSwap, LongContextLoadCompletesUnderEveryPreemptionMode) {
  const Workload w = long_context();
  const RunSummary recompute = summarize(simulate(w, "recompute"));
  const RunSummary swap = summarize(simulate(w, "swap"));
  const RunSummary autom = summarize(simulate(w, "auto"));
  const RunSummary auto_uncached = summarize(simulate(w, "auto", false));
  for (const RunSummary* s : {&recompute, &swap, &autom, &auto_uncached}) {
    EXPECT_EQ(s->completed, 24);
    EXPECT_EQ(s->total_output_tokens, recompute.total_output_tokens);
  }
  EXPECT_GT(recompute.engine.recompute_preemptions, 0);
  EXPECT_EQ(recompute.engine.swap_preemptions, 0);
  EXPECT_GT(swap.engine.swap_preemptions, 0);
  EXPECT_EQ(swap.engine.swapped_in_blocks, swap.engine.swapped_out_blocks);
  // With prefix caching a recomputing victim's full blocks stay cached, so auto recomputes;
  // without it, at this scale a 4k-token prefix costs far more to recompute than to copy both
  // ways, so auto swaps.
  EXPECT_GT(autom.engine.recompute_preemptions, 0);
  EXPECT_EQ(autom.engine.swap_preemptions, 0);
  EXPECT_GT(auto_uncached.engine.swap_preemptions, 0);
}

TEST(MultiTurn, TurnsResendAGrowingHistory) {
  const WorkloadSpec spec = parse_workload_spec(R"(
[workload]
name = "chat"
seed = 9
num_requests = 5
token_id_range = [1000, 2000]
[workload.arrival]
kind = "poisson"
rate = 1.0
[workload.prompt]
kind = "uniform"
min = 10
max = 20
[workload.output]
kind = "fixed"
value = 8
[workload.conversation]
turns = { kind = "fixed", value = 3 }
think_s = 2.0
think = "fixed"
)", "chat.toml");
  const Workload w = build_workload(spec);
  ASSERT_EQ(w.requests.size(), 15u);
  EXPECT_EQ(num_independent(w), 5u);
  const std::vector<int64_t> next = followers(w);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(w.requests[i].turn, 0);
    EXPECT_EQ(w.requests[i].after, -1);
    if (i > 0) EXPECT_LE(w.requests[i - 1].arrival_s, w.requests[i].arrival_s);
    // Each later turn starts with the whole previous prompt and 8 answer tokens after it.
    size_t prev = i;
    for (int64_t t = 1; t < 3; ++t) {
      const int64_t j = next[prev];
      ASSERT_GE(j, 5);
      const BenchRequest& r = w.requests[static_cast<size_t>(j)];
      EXPECT_EQ(r.turn, t);
      EXPECT_EQ(r.after, static_cast<int64_t>(prev));
      EXPECT_EQ(r.think_s, 2.0);
      const BenchRequest& p = w.requests[prev];
      ASSERT_GE(r.prompt_len, p.prompt_len + 8 + 10);
      EXPECT_TRUE(std::equal(p.prompt_token_ids.begin(), p.prompt_token_ids.end(), r.prompt_token_ids.begin()));
      prev = static_cast<size_t>(j);
    }
    EXPECT_EQ(next[prev], -1);
  }
  EXPECT_THROW(parse_workload_spec("[workload.conversation]\nthink = \"soon\"\n", "bad.toml"), Error);
}

TEST(MultiTurn, ALaterTurnIsSentItsThinkTimeAfterThePreviousFinished) {
  WorkloadSpec spec;
  spec.name = "chat";
  spec.num_requests = 4;
  spec.arrival = {.kind = ArrivalKind::kPoisson, .rate_per_s = 0.5};
  spec.prompt = {.kind = LengthKind::kFixed, .value = 300};
  spec.output = {.kind = LengthKind::kFixed, .value = 20};
  spec.conversation = ConversationSpec{.turns = {.kind = LengthKind::kFixed, .value = 3}, .think_s = 1.5,
                                       .think_fixed = true};
  spec.token_id_max = 4000;
  const Workload w = build_workload(spec);
  EngineConfig config;
  BuiltEngine target = build_sim_engine(config, load_cost_profile(kProfile), 4001);
  const RunResult run = run_in_process(target, w);
  const std::vector<int64_t> next = followers(w);
  for (size_t i = 0; i < w.requests.size(); ++i) {
    ASSERT_TRUE(run.records[i].success) << i;
    if (next[i] < 0) continue;
    EXPECT_NEAR(run.records[static_cast<size_t>(next[i])].arrival_s, run.records[i].finish_s + 1.5, 1e-6) << i;
  }
  const RunSummary s = summarize(run);
  EXPECT_EQ(s.returning_ttft_ms.count, 8);
  // A returning turn finds its previous prompt cached: 300 of 620 tokens for the second turn,
  // 620 of 940 for the third, none for the first.
  EXPECT_GT(s.prefix_hit_rate, 0.4);
}

}  // namespace
}  // namespace optimate::bench
