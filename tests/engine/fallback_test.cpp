// Automatic fallback: an optimizer that throws, answers the impossible, runs past the
// watchdog, makes a step fail or slows steps below the cost model's estimate is disabled, and
// the engine goes on with the baseline: every request finishes with the tokens a baseline
// engine gives. Rollback and restore by request.
#include <gtest/gtest.h>

#include <stdexcept>

#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

class ThrowingQueue final : public optim::QueuePolicy {
 public:
  explicit ThrowingQueue(int64_t calls_before) : left_(calls_before) {}
  std::string_view name() const override { return "throwing"; }
  std::vector<int64_t> order_waiting(const optim::SchedulerView& view) override {
    if (left_-- <= 0) throw std::runtime_error("queue policy bug");
    return {0};
  }

 private:
  int64_t left_;
};

class BadIndexQueue final : public optim::QueuePolicy {
 public:
  std::string_view name() const override { return "bad-index"; }
  std::vector<int64_t> order_waiting(const optim::SchedulerView& view) override {
    return {static_cast<int64_t>(view.waiting.size()) + 3};
  }
};

// Takes `cost_ms` of the policies' clock on every call.
class SlowBatch final : public optim::BatchPolicy {
 public:
  SlowBatch(std::shared_ptr<FakeClock> clock, double cost_ms) : clock_(std::move(clock)), cost_ms_(cost_ms) {}
  std::string_view name() const override { return "slow"; }
  optim::BatchDecision decide(const optim::SchedulerView&) override {
    clock_->advance_ms(cost_ms_);
    return {};
  }

 private:
  std::shared_ptr<FakeClock> clock_;
  double cost_ms_;
};

// Asks for KV blocks the mechanism cannot store: the scheduler refuses, the step fails.
class Int8Kv final : public optim::KvPolicy {
 public:
  std::string_view name() const override { return "int8-kv"; }
  kv::KvPrecision precision_for(const optim::SchedulerView&, const optim::RequestView&) override {
    return kv::KvPrecision::kInt8;
  }
};

// Fills the kernels slot, which shapes how steps run (the stable kernels all the same).
class NoopKernels final : public optim::KernelPolicy {
 public:
  std::string_view name() const override { return "shaping-sampler"; }
  optim::KernelChoice choose(std::span<const KernelFamily>) override { return {}; }
};

// A runner whose every forward takes `step_ms` of the engine clock.
class TimedRunner final : public ModelRunner {
 public:
  TimedRunner(std::unique_ptr<ModelRunner> inner, std::shared_ptr<FakeClock> clock, double step_ms)
      : inner_(std::move(inner)), clock_(std::move(clock)), step_ms_(step_ms) {}
  const ModelConfig& config() const override { return inner_->config(); }
  const KvCacheShape& kv_shape() const override { return inner_->kv_shape(); }
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override {
    inner_->forward(batch, logits);
    clock_->advance_ms(step_ms_);
  }
  void requantize(std::span<const RequantizeOp> ops) override { inner_->requantize(ops); }

 private:
  std::unique_ptr<ModelRunner> inner_;
  std::shared_ptr<FakeClock> clock_;
  double step_ms_;
};

struct Rig {
  std::shared_ptr<FakeClock> clock = std::make_shared<FakeClock>();
  std::shared_ptr<FakeClock> policy_clock = std::make_shared<FakeClock>();
  std::vector<std::string> decisions;
};

// A factory filling one slot of the policy set with a new Impl(args...).
template <typename Impl, typename Slot, typename... Args>
optim::OptimizerFactory one(std::shared_ptr<Slot> optim::PolicySet::*slot, Args... args) {
  return [=](optim::OptionReader&, const optim::BuildContext&) {
    optim::PolicySet set;
    set.*slot = std::make_shared<Impl>(args...);
    return set;
  };
}

Engine make_engine(Rig& rig, std::vector<OptimizerSpec> optimizers, double step_ms = 0.0,
                   StepEstimator estimator = {}) {
  EngineConfig c;
  c.max_model_len = 256;
  c.block_size = 4;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 64;
  c.optimizers = std::move(optimizers);
  EngineParts parts;
  std::unique_ptr<ModelRunner> runner = std::make_unique<FakeModelRunner>(256, 4);
  if (step_ms > 0) runner = std::make_unique<TimedRunner>(std::move(runner), rig.clock, step_ms);
  parts.runner = std::move(runner);
  parts.codec = std::make_shared<FakeCodec>();
  parts.clock = rig.clock;
  parts.policy_clock = rig.policy_clock;
  parts.step_estimator = std::move(estimator);
  parts.decisions = std::make_shared<DecisionLog>([&rig](std::string_view line) { rig.decisions.emplace_back(line); });
  parts.registry.register_optimizer("throwing", "test", one<ThrowingQueue>(&optim::PolicySet::queue, int64_t{2}));
  parts.registry.register_optimizer("bad-index", "test", one<BadIndexQueue>(&optim::PolicySet::queue));
  parts.registry.register_optimizer("slow", "test", one<SlowBatch>(&optim::PolicySet::batch, rig.policy_clock, 300.0));
  parts.registry.register_optimizer("int8-kv", "test", one<Int8Kv>(&optim::PolicySet::kv));
  parts.registry.register_optimizer("shaping-sampler", "test", one<NoopKernels>(&optim::PolicySet::kernels));
  return Engine(c, std::move(parts));
}

void add_requests(Engine& e, int n, int64_t max_tokens = 12) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  for (int i = 0; i < n; ++i)
    e.add_request("r" + std::to_string(i), std::vector<int32_t>{3, static_cast<int32_t>(4 + i), 5}, p);
}

// What a baseline engine produces for the same requests.
Results baseline_results(int n, int64_t max_tokens = 12) {
  Rig rig;
  Engine e = make_engine(rig, {});
  add_requests(e, n, max_tokens);
  return run_to_completion(e);
}

const OptimizerState* state_of(const std::vector<OptimizerState>& states, const std::string& name) {
  for (const auto& s : states)
    if (s.spec.name == name) return &s;
  return nullptr;
}

void expect_fell_back(Engine& e, const Rig& rig, const std::string& name, const std::string& reason) {
  const auto states = e.optimizer_states();
  const OptimizerState* s = state_of(states, name);
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->spec.enabled);
  ASSERT_TRUE(s->fallback.has_value());
  EXPECT_EQ(fallback_reason_name(s->fallback->reason), reason) << s->fallback->detail;
  EXPECT_EQ((e.stats().optimizer_fallbacks.at({name, reason})), 1);
  bool logged = false;
  for (const std::string& line : rig.decisions)
    logged |= line.find("\"event\":\"fallback\"") != std::string::npos &&
              line.find("\"optimizer\":\"" + name + "\"") != std::string::npos &&
              line.find("\"reason\":\"" + reason + "\"") != std::string::npos;
  EXPECT_TRUE(logged);
}

TEST(Fallback, AThrowingPolicyFallsBackAndEveryRequestFinishesAsOnTheBaseline) {
  Rig rig;
  Engine e = make_engine(rig, {{"throwing", {}, true}});
  add_requests(e, 6);
  const Results results = run_to_completion(e);
  EXPECT_EQ(tokens_of(results), tokens_of(baseline_results(6)));
  expect_fell_back(e, rig, "throwing", "error");
}

TEST(Fallback, AnImpossibleDecisionIsAFault) {
  Rig rig;
  Engine e = make_engine(rig, {{"bad-index", {}, true}});
  add_requests(e, 3);
  EXPECT_EQ(tokens_of(run_to_completion(e)), tokens_of(baseline_results(3)));
  expect_fell_back(e, rig, "bad-index", "error");
}

TEST(Fallback, TheWatchdogTripsAfterThreeSlowCallsInARow) {
  Rig rig;
  Engine e = make_engine(rig, {{"slow", {}, true}});  // 300 ms a call, the watchdog at 250
  SamplingParams p;
  p.max_tokens = 2;
  auto arrive_and_step = [&](int i) {
    e.add_request("w" + std::to_string(i), std::vector<int32_t>{3, 4}, p);
    e.step();
  };
  arrive_and_step(0);
  arrive_and_step(1);
  EXPECT_TRUE(state_of(e.optimizer_states(), "slow")->spec.enabled);  // two slow calls: not yet
  for (int i = 2; i < 5; ++i) arrive_and_step(i);
  run_to_completion(e);
  expect_fell_back(e, rig, "slow", "watchdog");
  // Its time is counted: the three slow calls, and nothing after the fault.
  EXPECT_NEAR(e.stats().optimizer_seconds.at("slow"), 0.9, 1e-6);
}

TEST(Fallback, AStepTheSchedulerRefusesFallsBackAndIsPlannedAgain) {
  Rig rig;
  Engine e = make_engine(rig, {{"int8-kv", {}, true}});
  add_requests(e, 3);
  EXPECT_EQ(tokens_of(run_to_completion(e)), tokens_of(baseline_results(3)));
  expect_fell_back(e, rig, "int8-kv", "step_failure");
}

TEST(Fallback, StepsSlowerThanTheCostModelFallBackFromWhatShapesThem) {
  Rig rig;
  // The cost model expects 1 ms a step; this backend takes 3 ms.
  Engine e = make_engine(rig, {{"shaping-sampler", {}, true}}, 3.0, [](const ForwardBatch&) { return 0.001; });
  add_requests(e, 4, 240);  // more steps than the guard's window
  run_to_completion(e);
  expect_fell_back(e, rig, "shaping-sampler", "throughput");
}

TEST(Fallback, ABackendSlowerThanItsProfileAloneBlamesNoOptimizer) {
  Rig rig;
  Engine e = make_engine(rig, {}, 3.0, [](const ForwardBatch&) { return 0.001; });
  add_requests(e, 4, 240);
  run_to_completion(e);
  EXPECT_TRUE(e.stats().optimizer_fallbacks.empty());
}

TEST(Fallback, RollbackReturnsEverythingToTheBaselineAndRestoreBringsItBack) {
  Rig rig;
  Engine e = make_engine(rig, {{"priority", {}, true}, {"adaptive", {{"ttft_p99_ms", 100.0}}, true}});
  e.set_limits(8, 128);  // as a controller would
  e.rollback_optimizers("test");
  for (const OptimizerState& s : e.optimizer_states()) {
    if (s.baseline) continue;
    EXPECT_FALSE(s.spec.enabled) << s.spec.name;
    EXPECT_TRUE(s.rolled_back) << s.spec.name;
  }
  EXPECT_EQ(e.limits().max_num_seqs, 4);  // the configured limits
  EXPECT_EQ(e.limits().max_num_batched_tokens, 64);
  EXPECT_EQ(e.scheduler().policies().queue->name(), "fcfs");
  EXPECT_EQ(e.scheduler().policies().controller, nullptr);
  add_requests(e, 3);
  EXPECT_EQ(tokens_of(run_to_completion(e)), tokens_of(baseline_results(3)));

  e.restore_optimizers();
  EXPECT_EQ(e.scheduler().policies().queue->name(), "priority");
  ASSERT_NE(e.scheduler().policies().controller, nullptr);
  for (const OptimizerState& s : e.optimizer_states()) EXPECT_TRUE(s.baseline || s.spec.enabled);
  bool rollback = false, restore = false;
  for (const std::string& line : rig.decisions) {
    rollback |= line.find("\"event\":\"rollback\"") != std::string::npos;
    restore |= line.find("\"event\":\"restore\"") != std::string::npos;
  }
  EXPECT_TRUE(rollback && restore);
}

TEST(Fallback, RestoreAfterAFallbackReenablesTheOptimizer) {
  Rig rig;
  Engine e = make_engine(rig, {{"throwing", {}, true}});
  add_requests(e, 3);
  run_to_completion(e);
  ASSERT_FALSE(state_of(e.optimizer_states(), "throwing")->spec.enabled);
  e.restore_optimizers();
  const OptimizerState* s = state_of(e.optimizer_states(), "throwing");
  EXPECT_TRUE(s->spec.enabled);
  EXPECT_FALSE(s->fallback.has_value());
}

// A baseline named in the configuration and disabled still runs in its slot (nothing else takes
// it): the listing shows it once, as the baseline, not as a disabled optimizer beside it.
TEST(Fallback, ADisabledBaselineIsListedOnceAsTheBaseline) {
  Rig rig;
  Engine e = make_engine(rig, {{"fcfs", {}, false}, {"full-precision-kv", {}, false}});
  for (const char* name : {"fcfs", "full-precision-kv"}) {
    const auto states = e.optimizer_states();
    EXPECT_EQ(std::ranges::count_if(states, [&](const OptimizerState& s) { return s.spec.name == name; }), 1) << name;
    EXPECT_TRUE(state_of(states, name)->baseline) << name;
  }
  EXPECT_EQ(e.scheduler().policies().queue->name(), "fcfs");
}

}  // namespace
}  // namespace optimate::testing
