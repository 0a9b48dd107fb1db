// An AsyncEngine whose batch policy holds every request back, with nothing running, sleeps
// until the policy's retry time or a new submission instead of stepping in a loop.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "engine/async_engine.h"
#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

class HoldFor final : public optim::BatchPolicy {
 public:
  HoldFor(std::atomic<int64_t>& calls, int64_t hold_ns) : calls_(calls), hold_ns_(hold_ns) {}
  std::string_view name() const override { return "hold-for"; }
  optim::BatchDecision decide(const optim::SchedulerView& view) override {
    ++calls_;
    const int64_t release = view.waiting.front().arrival_ns + hold_ns_;
    if (view.now_ns >= release) return {};
    return {false, release};
  }

 private:
  std::atomic<int64_t>& calls_;
  int64_t hold_ns_;
};

Engine make_engine(std::atomic<int64_t>& calls, int64_t hold_ns) {
  EngineConfig c;
  c.max_model_len = 256;
  c.block_size = 4;
  c.optimizers = {OptimizerSpec{"hold-for", {}}};
  EngineParts parts;
  parts.runner = std::make_unique<FakeModelRunner>(256, 4);
  parts.registry.register_optimizer("hold-for", "test", [&calls, hold_ns](optim::OptionReader&) {
    optim::PolicySet set;
    set.batch = std::make_shared<HoldFor>(calls, hold_ns);
    return set;
  });
  return Engine(c, std::move(parts));  // the steady clock: the engine thread really waits
}

SamplingParams two_tokens() {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 2;
  return p;
}

TEST(AsyncEngineIdle, SleepsUntilTheRetryTimeThenRuns) {
  std::atomic<int64_t> calls{0};
  AsyncEngine engine(make_engine(calls, 200'000'000));  // held for 200 ms
  auto stream = engine.submit("a", std::vector<int32_t>{3, 4, 5}, two_tokens());
  std::vector<int32_t> tokens;
  while (auto out = stream->next()) tokens.insert(tokens.end(), out->new_token_ids.begin(), out->new_token_ids.end());
  EXPECT_EQ(tokens.size(), 2u);
  // One look on arrival, one at the retry time (a spurious wakeup or two at most); a busy
  // loop would have asked thousands of times in 200 ms.
  EXPECT_LE(calls.load(), 5);
  EXPECT_GE(calls.load(), 2);
}

TEST(AsyncEngineIdle, NewSubmissionWakesAHeldEngine) {
  std::atomic<int64_t> calls{0};
  AsyncEngine engine(make_engine(calls, int64_t{3600} * 1'000'000'000));  // held for an hour
  auto a = engine.submit("a", std::vector<int32_t>{3, 4, 5}, two_tokens());
  while (calls.load() < 1) std::this_thread::yield();
  auto b = engine.submit("b", std::vector<int32_t>{6, 7}, two_tokens());
  while (calls.load() < 2) std::this_thread::yield();  // b's arrival was looked at
  const int64_t seen = calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_LE(calls.load(), seen + 1);  // and then it went back to sleep
  engine.shutdown(ShutdownMode::kAbort);
  EXPECT_EQ(a->next()->finish_reason, FinishReason::kAbort);
}

}  // namespace
}  // namespace optimate::testing
