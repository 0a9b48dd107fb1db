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

Engine make_engine(std::atomic<int64_t>& calls, int64_t hold_ns, std::shared_ptr<FakeClock> clock) {
  EngineConfig c;
  c.max_model_len = 256;
  c.block_size = 4;
  c.optimizers = {OptimizerSpec{"hold-for", {}}};
  EngineParts parts;
  parts.runner = std::make_unique<FakeModelRunner>(256, 4);
  parts.clock = std::move(clock);
  parts.registry.register_optimizer("hold-for", "test", [&calls, hold_ns](optim::OptionReader&) {
    optim::PolicySet set;
    set.batch = std::make_shared<HoldFor>(calls, hold_ns);
    return set;
  });
  return Engine(c, std::move(parts));
}

SamplingParams two_tokens() {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 2;
  return p;
}

// Until the engine thread has begun its `n`th wait (it waits only when it has nothing to step).
void until_waits(const FakeClock& clock, int64_t n) {
  while (clock.num_waits() < n) std::this_thread::yield();
}

TEST(AsyncEngineIdle, SleepsUntilTheRetryTimeThenRuns) {
  std::atomic<int64_t> calls{0};
  auto clock = std::make_shared<FakeClock>(1'000'000'000);
  AsyncEngine engine(make_engine(calls, 200'000'000, clock));  // held for 200 ms
  auto stream = engine.submit("a", std::vector<int32_t>{3, 4, 5}, two_tokens());
  until_waits(*clock, 1);
  // One look on arrival, then asleep until the policy's retry time; a busy loop would be asking
  // again and again.
  EXPECT_EQ(clock->waiting_until_ns(), 1'200'000'000);
  EXPECT_EQ(calls.load(), 1);
  clock->advance_ms(200);
  std::vector<int32_t> tokens;
  while (auto out = stream->next()) tokens.insert(tokens.end(), out->new_token_ids.begin(), out->new_token_ids.end());
  EXPECT_EQ(tokens.size(), 2u);
  EXPECT_EQ(calls.load(), 2);  // the look at the retry time admitted it
}

TEST(AsyncEngineIdle, NewSubmissionWakesAHeldEngine) {
  std::atomic<int64_t> calls{0};
  auto clock = std::make_shared<FakeClock>(1'000'000'000);
  AsyncEngine engine(make_engine(calls, int64_t{3600} * 1'000'000'000, clock));  // held for an hour
  auto a = engine.submit("a", std::vector<int32_t>{3, 4, 5}, two_tokens());
  until_waits(*clock, 1);
  EXPECT_EQ(calls.load(), 1);
  auto b = engine.submit("b", std::vector<int32_t>{6, 7}, two_tokens());
  until_waits(*clock, 2);  // b's arrival was looked at, and the engine went back to sleep
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(clock->waiting_until_ns(), 1'000'000'000 + int64_t{3600} * 1'000'000'000);
  engine.shutdown(ShutdownMode::kAbort);
  EXPECT_EQ(a->next()->finish_reason, FinishReason::kAbort);
  EXPECT_EQ(b->next()->finish_reason, FinishReason::kAbort);
}

}  // namespace
}  // namespace optimate::testing
