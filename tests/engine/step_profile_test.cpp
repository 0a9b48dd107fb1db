// The engine's account of where its steps' time goes (engine/step_profile.h): host phases on
// the engine's clock, the runner's device time per step kind, and the stage times of every
// Nth step, as /metrics and `optimate bench` report them.
#include <gtest/gtest.h>

#include <memory>

#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

// The fake model, taking 3 ms of the engine's clock per forward, of which the "device" was
// busy 2 ms; a step asked to be timed by stage reports two stages.
class TimedRunner final : public ModelRunner {
 public:
  TimedRunner(std::shared_ptr<FakeClock> clock, bool measures) : clock_(std::move(clock)), measures_(measures) {}
  const ModelConfig& config() const override { return inner_.config(); }
  const KvCacheShape& kv_shape() const override { return inner_.kv_shape(); }
  void requantize(std::span<const RequantizeOp> ops) override { inner_.requantize(ops); }
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override {
    inner_.forward(batch, logits);
    clock_->advance_ms(3.0);
    staged_ = stage_next_;
    stage_next_ = false;
    ++forwards_;
  }
  void time_next_step_by_stage() override { stage_next_ = true; }
  bool last_step_device_times(StepDeviceTimes& out) const override {
    if (!measures_) return false;
    out.busy_s = 0.002;
    out.stages.clear();
    if (staged_) out.stages = {{"attention", 0.0005}, {"qkv_proj", 0.001}};
    return true;
  }
  int64_t forwards() const { return forwards_; }

 private:
  FakeModelRunner inner_{256, 4};
  std::shared_ptr<FakeClock> clock_;
  bool measures_;
  bool stage_next_ = false, staged_ = false;
  int64_t forwards_ = 0;
};

Engine make_engine(std::shared_ptr<FakeClock> clock, bool measures, int64_t interval, TimedRunner** runner) {
  EngineConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 64;
  c.max_model_len = 256;
  c.block_size = 4;
  c.stage_profile_interval = interval;
  EngineParts parts;
  auto r = std::make_unique<TimedRunner>(clock, measures);
  *runner = r.get();
  parts.runner = std::move(r);
  parts.codec = std::make_shared<FakeCodec>();
  parts.clock = clock;
  return Engine(c, std::move(parts));
}

TEST(StepProfile, CountsStepsByKindDeviceTimeAndEveryNthStepsStages) {
  auto clock = std::make_shared<FakeClock>();
  TimedRunner* runner = nullptr;
  Engine engine = make_engine(clock, /*measures=*/true, /*interval=*/4, &runner);
  engine.add_request("a", std::vector<int32_t>{5, 6, 7, 8, 9}, greedy(10));
  engine.add_request("b", std::vector<int32_t>{10, 11, 12}, greedy(10));
  while (engine.has_unfinished()) engine.step();
  const StepProfile p = engine.stats().step_profile;
  // One step prefills both prompts (and samples their first tokens); nine decode the rest.
  ASSERT_EQ(runner->forwards(), 10);
  EXPECT_EQ(p.steps.at("prefill"), 1);
  EXPECT_EQ(p.steps.at("decode"), 9);
  EXPECT_NEAR(p.device_seconds.at("prefill"), 0.002, 1e-12);
  EXPECT_NEAR(p.device_seconds.at("decode"), 9 * 0.002, 1e-12);
  // Steps 0, 4 and 8 are timed by stage: the prefill and two decodes.
  EXPECT_EQ(p.staged_steps.at("prefill"), 1);
  EXPECT_EQ(p.staged_steps.at("decode"), 2);
  EXPECT_NEAR((p.stage_seconds.at({"decode", "attention"})), 2 * 0.0005, 1e-12);
  EXPECT_NEAR((p.stage_seconds.at({"prefill", "qkv_proj"})), 0.001, 1e-12);
  // The forward phase is the runner's 3 ms a step on the engine's clock; nothing else took time.
  EXPECT_NEAR(p.phase_seconds.at("forward"), 10 * 0.003, 1e-9);
  EXPECT_NEAR(p.phase_seconds.at("schedule"), 0.0, 1e-12);
  EXPECT_NEAR(p.phase_seconds.at("update"), 0.0, 1e-12);
}

TEST(StepProfile, TheGapBetweenStepsCountsOnlyWhileWorkIsLeft) {
  auto clock = std::make_shared<FakeClock>();
  TimedRunner* runner = nullptr;
  Engine engine = make_engine(clock, /*measures=*/false, /*interval=*/0, &runner);
  engine.add_request("a", std::vector<int32_t>{5, 6, 7}, greedy(3));
  engine.step();
  clock->advance_ms(7.0);  // the serving loop's hand-off before the next step
  engine.step();
  engine.step();
  ASSERT_FALSE(engine.has_unfinished());
  clock->advance_ms(1000.0);  // idle: nothing to do, not a gap between steps
  engine.add_request("b", std::vector<int32_t>{5, 6, 7}, greedy(1));
  engine.step();
  const StepProfile p = engine.stats().step_profile;
  EXPECT_NEAR(p.phase_seconds.at("between"), 0.007, 1e-9);
  EXPECT_EQ(p.steps.at("prefill"), 2);
  EXPECT_EQ(p.steps.at("decode"), 2);
  // A runner that measures nothing leaves the device's side empty, and nothing asks for stages.
  EXPECT_TRUE(p.device_seconds.empty());
  EXPECT_TRUE(p.staged_steps.empty());
}

}  // namespace
}  // namespace optimate::testing
