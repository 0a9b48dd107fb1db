// The decision log: every admission out of arrival order, preemption, batch hold and
// controller action is one JSON line with its reason and figures.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

using nlohmann::json;

// Holds while fewer than two requests wait.
class HoldForTwo final : public optim::BatchPolicy {
 public:
  std::string_view name() const override { return "hold-for-two"; }
  optim::BatchDecision decide(const optim::SchedulerView& view) override {
    if (view.waiting.size() >= 2) return {};
    return {false, view.now_ns + 10'000'000};
  }
};

struct Logged {
  std::vector<json> records;
  std::shared_ptr<DecisionLog> log = std::make_shared<DecisionLog>([this](std::string_view line) {
    records.push_back(json::parse(line));  // every line is one JSON object
  });
  std::vector<json> of(const std::string& event) const {
    std::vector<json> out;
    for (const json& r : records)
      if (r["event"] == event) out.push_back(r);
    return out;
  }
};

Engine make_engine(Logged& logged, std::shared_ptr<FakeClock> clock, std::vector<OptimizerSpec> optimizers,
                   int64_t max_num_seqs) {
  EngineConfig c;
  c.max_model_len = 256;
  c.block_size = 4;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = 64;
  c.optimizers = std::move(optimizers);
  EngineParts parts;
  parts.runner = std::make_unique<FakeModelRunner>(256, 4);
  parts.clock = clock;
  parts.decisions = logged.log;
  parts.registry.register_optimizer("hold-for-two", "test", [](optim::OptionReader&) {
    optim::PolicySet set;
    set.batch = std::make_shared<HoldForTwo>();
    return set;
  });
  return Engine(c, std::move(parts));
}

void add(Engine& e, const std::string& id, int64_t priority, int64_t max_tokens = 20) {
  SamplingParams p;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  RequestMetadata m;
  m.priority = EnginePriority{priority};
  e.add_request(id, std::vector<int32_t>{3, 4, 5}, p, m);
}

TEST(DecisionLog, PriorityPreemptionAndTheAdmissionItMakesRoomFor) {
  Logged logged;
  auto clock = std::make_shared<FakeClock>();
  Engine e = make_engine(logged, clock, {{"priority", {{"min_run_ms", 0.0}}, true}}, 2);
  add(e, "low-1", 0);
  add(e, "low-2", 0);
  e.step();
  clock->advance_ms(10);
  add(e, "high", 3);
  e.step();
  const auto preemptions = logged.of("preemption");
  ASSERT_EQ(preemptions.size(), 1u);
  EXPECT_EQ(preemptions[0]["optimizer"], "priority");
  EXPECT_EQ(preemptions[0]["reason"], "max_num_seqs");
  EXPECT_EQ(preemptions[0]["for_request_id"], "high");
  EXPECT_EQ(preemptions[0]["priority"], 0);
  const auto admissions = logged.of("admission");
  ASSERT_EQ(admissions.size(), 1u);
  EXPECT_EQ(admissions[0]["request_id"], "high");
  EXPECT_EQ(admissions[0]["ahead_of_priority"], 0);
  EXPECT_EQ(admissions[0]["num_waiting_earlier"], 1);
  EXPECT_NEAR(admissions[0]["ahead_of_waited_ms"].get<double>(), 10.0, 1e-9);
  for (const json& r : logged.records) {
    EXPECT_TRUE(r.contains("t_s") && r.contains("optimizer") && r.contains("reason")) << r.dump();
    EXPECT_NEAR(r["t_s"].get<double>(), 0.010, 1e-9);
  }
}

TEST(DecisionLog, ABatchHoldIsOneRecordWhenItStarts) {
  Logged logged;
  auto clock = std::make_shared<FakeClock>();
  Engine e = make_engine(logged, clock, {{"hold-for-two", {}, true}}, 8);
  add(e, "a", 0);
  e.step();
  e.step();
  add(e, "b", 0);
  run_to_completion(e);
  const auto holds = logged.of("batch_hold");
  ASSERT_EQ(holds.size(), 1u);
  EXPECT_EQ(holds[0]["optimizer"], "hold-for-two");
  EXPECT_EQ(holds[0]["num_waiting"], 1);
  EXPECT_NEAR(holds[0]["hold_ms"].get<double>(), 10.0, 1e-9);
  // FCFS admits in arrival order: nothing out of order.
  EXPECT_TRUE(logged.of("admission").empty());
}

TEST(DecisionLog, ControllerActionsCarryTheirSignals) {
  Logged logged;
  auto clock = std::make_shared<FakeClock>();
  Engine e = make_engine(logged, clock, {{"adaptive", {{"ttft_p99_ms", 200.0}, {"batch_wait", false}}, true}}, 2);
  for (int i = 0; i < 12; ++i) add(e, "r" + std::to_string(i), 0, 200);
  for (int i = 0; i < 60 && logged.of("controller").empty(); ++i) {
    e.step();
    clock->advance_ms(100);
  }
  const auto actions = logged.of("controller");
  ASSERT_FALSE(actions.empty());
  EXPECT_EQ(actions[0]["optimizer"], "adaptive");
  EXPECT_EQ(actions[0]["knob"], "max_num_seqs");
  EXPECT_EQ(actions[0]["from"], 2.0);
  EXPECT_GT(actions[0]["to"].get<double>(), 2.0);
  EXPECT_GT(actions[0]["figures"]["oldest_waiting_ms"].get<double>(), 200.0);
  EXPECT_EQ(e.limits().max_num_seqs, actions[0]["to"].get<int64_t>());
}

}  // namespace
}  // namespace optimate::testing
