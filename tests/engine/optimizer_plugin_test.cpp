// A new optimizer plugs in through the registry alone, can be swapped out between steps, and
// reports its own counters.
#include <gtest/gtest.h>

#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

// Holds new requests back until `min_waiting` are queued or `max_wait_ms` has passed.
class HoldUntilBatch final : public optim::BatchPolicy {
 public:
  HoldUntilBatch(int64_t min_waiting, double max_wait_ms)
      : min_waiting_(min_waiting), max_wait_ns_(static_cast<int64_t>(max_wait_ms * 1e6)) {}
  std::string_view name() const override { return "hold"; }
  optim::BatchDecision decide(const optim::SchedulerView& view) override {
    const int64_t oldest = view.waiting.empty() ? view.now_ns : view.waiting.front().arrival_ns;
    if (static_cast<int64_t>(view.waiting.size()) >= min_waiting_ || view.now_ns - oldest >= max_wait_ns_)
      return {};
    ++holds_;
    return {false, oldest + max_wait_ns_};
  }
  std::vector<optim::PolicyCounter> counters() const override { return {{"holds", double(holds_)}}; }

 private:
  int64_t min_waiting_;
  int64_t max_wait_ns_;
  int64_t holds_ = 0;
};

Engine make_engine(std::shared_ptr<FakeClock> clock, bool enabled) {
  EngineConfig c;
  c.max_model_len = 256;
  c.block_size = 4;
  c.optimizers = {OptimizerSpec{"hold", {{"min_waiting", int64_t{3}}, {"max_wait_ms", 50.0}}, enabled}};
  EngineParts parts;
  parts.runner = std::make_unique<FakeModelRunner>(256, 4);
  parts.clock = clock;
  parts.registry.register_optimizer("hold", "test batch policy", [](optim::OptionReader& r) {
    auto policy = std::make_shared<HoldUntilBatch>(r.get_int("min_waiting", 2), r.get_double("max_wait_ms", 10));
    optim::PolicySet set;
    set.batch = policy;
    return set;
  });
  return Engine(c, std::move(parts));
}

TEST(OptimizerPlugin, BatchPolicyFromRegistryHoldsAndReleases) {
  auto clock = std::make_shared<FakeClock>();
  Engine engine = make_engine(clock, true);
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 2;
  engine.add_request("a", std::vector<int32_t>{3, 4}, p);
  EXPECT_TRUE(engine.step().empty());
  EXPECT_EQ(engine.scheduler().num_running(), 0);
  clock->advance_ms(60);  // past max_wait_ms: released alone
  engine.step();
  EXPECT_EQ(engine.scheduler().num_running(), 1);
  run_to_completion(engine);

  engine.add_request("b", std::vector<int32_t>{3, 4}, p);
  engine.step();
  EXPECT_EQ(engine.scheduler().num_running(), 0);
  // Rollback: disabling the optimizer between steps restores launch-at-once.
  engine.set_optimizer(OptimizerSpec{"hold", {}, false});
  engine.step();
  EXPECT_EQ(engine.scheduler().num_running(), 1);

  bool found = false;
  for (const auto& c : engine.optimizer_counters())
    if (c.optimizer == "launch-at-once") found = true;
  EXPECT_TRUE(found);
  engine.set_optimizer(OptimizerSpec{"hold", {{"min_waiting", int64_t{3}}, {"max_wait_ms", 50.0}}});
  for (const auto& c : engine.optimizer_counters())
    if (c.optimizer == "hold") {
      ASSERT_EQ(c.counters.size(), 1u);
      EXPECT_EQ(c.counters[0].name, "holds");
    }
}

TEST(OptimizerPlugin, DisabledInConfigRunsBaseline) {
  auto clock = std::make_shared<FakeClock>();
  Engine engine = make_engine(clock, false);
  SamplingParams p;
  p.max_tokens = 1;
  engine.add_request("a", std::vector<int32_t>{3}, p);
  EXPECT_EQ(engine.step().size(), 1u);
}

}  // namespace
}  // namespace optimate::testing
