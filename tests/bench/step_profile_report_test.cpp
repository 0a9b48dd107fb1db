// The engine profile of a live run: exported by the server's registry (StepProfileMetrics),
// read back from the Prometheus text by `optimate bench --url`, subtracted between two scrapes
// and rendered.
#include <gtest/gtest.h>

#include "bench/step_profile_report.h"
#include "metrics/registry.h"
#include "metrics/step_profile_metrics.h"

namespace optimate::bench {
namespace {

StepProfile sample_profile(double scale) {
  StepProfile p;
  p.phase_seconds = {{"between", 0.5 * scale}, {"schedule", 0.25 * scale}, {"forward", 8.0 * scale},
                     {"update", 1.25 * scale}};
  p.steps = {{"decode", static_cast<int64_t>(300 * scale)}, {"prefill", static_cast<int64_t>(100 * scale)}};
  p.device_seconds = {{"decode", 3.0 * scale}, {"prefill", 4.5 * scale}};
  p.staged_steps = {{"decode", static_cast<int64_t>(4 * scale)}, {"prefill", static_cast<int64_t>(2 * scale)}};
  p.stage_seconds = {{{"decode", "attention"}, 0.02 * scale}, {{"prefill", "attention"}, 0.03 * scale},
                     {{"prefill", "gate_up_proj"}, 0.05 * scale}};
  return p;
}

std::string exposition(const StepProfile& p, const std::string& model) {
  metrics::Registry registry;
  metrics::StepProfileMetrics m(registry, model);
  m.set(p.phase_seconds, p.steps, p.device_seconds, p.staged_steps, p.stage_seconds);
  return registry.render();
}

// Equal totals; a key one side lacks counts as 0 there (the server exports every phase and
// kind from the start, at 0).
template <typename Map>
void expect_same_totals(const Map& a, const Map& b) {
  Map keys = a;
  keys.insert(b.begin(), b.end());
  for (const auto& [k, unused] : keys) {
    const auto x = a.find(k), y = b.find(k);
    EXPECT_NEAR(x == a.end() ? 0.0 : double(x->second), y == b.end() ? 0.0 : double(y->second), 1e-9);
  }
}

void expect_same(const StepProfile& a, const StepProfile& b) {
  expect_same_totals(a.phase_seconds, b.phase_seconds);
  expect_same_totals(a.steps, b.steps);
  expect_same_totals(a.device_seconds, b.device_seconds);
  expect_same_totals(a.staged_steps, b.staged_steps);
  expect_same_totals(a.stage_seconds, b.stage_seconds);
}

TEST(StepProfileReport, ReadsBackWhatTheServerExports) {
  const StepProfile p = sample_profile(1.0);
  bool found = false;
  // A model name with characters the exposition escapes.
  const StepProfile read = parse_step_profile(exposition(p, "org/model \"v2\""), found);
  ASSERT_TRUE(found);
  expect_same(read, p);
  // A server that has run no step yet still exports its phases, at 0.
  const StepProfile empty = parse_step_profile(exposition(StepProfile{}, "m"), found);
  EXPECT_TRUE(found);
  EXPECT_EQ(empty.phase_seconds.size(), 6u);
  EXPECT_EQ(empty.steps.at("decode"), 0);
}

TEST(StepProfileReport, ARunIsTheDifferenceOfTwoScrapes) {
  bool found = false;
  const StepProfile before = parse_step_profile(exposition(sample_profile(1.0), "m"), found);
  const StepProfile after = parse_step_profile(exposition(sample_profile(3.0), "m"), found);
  expect_same(step_profile_delta(after, before), sample_profile(2.0));
}

TEST(StepProfileReport, AServerWithoutTheSeriesIsNoProfile) {
  bool found = true;
  parse_step_profile("# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n"
                     "vllm:num_requests_running{model_name=\"m\"} 3\n",
                     found);
  EXPECT_FALSE(found);
  parse_step_profile("", found);
  EXPECT_FALSE(found);
  // A value that is not a number is skipped, not cast.
  const StepProfile odd = parse_step_profile("optimate:engine_steps_total{kind=\"decode\"} NaN\n"
                                             "optimate:engine_steps_total{kind=\"prefill\"} 4\n",
                                             found);
  EXPECT_TRUE(found);
  EXPECT_EQ(odd.steps.count("decode"), 0u);
  EXPECT_EQ(odd.steps.at("prefill"), 4);
}

TEST(StepProfileReport, RendersPhasesDeviceShareAndStagesPerStep) {
  const std::string md = render_step_profile("fcfs", sample_profile(1.0));
  // The engine's time is the phases' sum, 10 s; forward is 80% of it, the device busy 75%.
  EXPECT_NE(md.find("| forward | 8.00 | 80.0% |"), std::string::npos) << md;
  EXPECT_NE(md.find("Device busy 7.50 s: 75.0% of the engine's time"), std::string::npos) << md;
  // Stages per timed step: prefill's attention 30 ms over 2 steps, 37.5% of its timed time.
  EXPECT_NE(md.find("| attention | 15.000 | 37.5% |"), std::string::npos) << md;
  EXPECT_NE(md.find("decode steps: 300, device 10.00 ms per step; 4 timed by stage"), std::string::npos) << md;
  EXPECT_EQ(render_step_profile("empty", StepProfile{}), "");
}

}  // namespace
}  // namespace optimate::bench
