// Applying a new configuration between steps: hot settings and optimizers take effect at once,
// running requests go on to the same tokens, settings that need a restart are reported and
// left alone, and an invalid configuration changes nothing.
#include <gtest/gtest.h>

#include <functional>

#include "core/error.h"
#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

void add_requests(Engine& e, int n) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 16;
  p.ignore_eos = true;
  for (int i = 0; i < n; ++i)
    e.add_request("r" + std::to_string(i), std::vector<int32_t>{3, static_cast<int32_t>(4 + i), 5}, p);
}

TEST(ConfigReload, HotSettingsApplyBetweenStepsAndNoRequestIsDropped) {
  Engine reference = make_fake_engine();
  add_requests(reference, 8);
  const Results expected = run_to_completion(reference);

  Engine e = make_fake_engine();
  add_requests(e, 8);
  Results results;
  for (int i = 0; i < 3; ++i) collect(e.step(), results);
  EngineConfig next = e.config();
  next.max_num_seqs = 3;
  next.optimizer_watchdog_ms = 100;
  next.optimizers = {{"priority", {{"levels", int64_t{2}}}, true}};
  const ConfigApplyReport report = e.apply_config(next);
  EXPECT_EQ(report.version, 2);
  EXPECT_EQ(e.config_version(), 2);
  std::vector<std::string> keys;
  for (const SettingDiff& d : report.applied) keys.push_back(d.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"max_num_seqs", "optimizer_watchdog_ms", "optimizers"}));
  EXPECT_TRUE(report.needs_restart.empty());
  EXPECT_EQ(e.limits().max_num_seqs, 3);
  EXPECT_EQ(e.scheduler().policies().queue->name(), "priority");
  while (e.has_unfinished()) collect(e.step(), results);
  EXPECT_EQ(tokens_of(results), tokens_of(expected));
}

TEST(ConfigReload, SettingsThatNeedARestartAreReportedNotApplied) {
  Engine e = make_fake_engine();
  EngineConfig next = e.config();
  next.block_size = 8;
  next.seed = 99;
  const ConfigApplyReport report = e.apply_config(next);
  ASSERT_EQ(report.needs_restart.size(), 2u);
  EXPECT_EQ(report.needs_restart[0].key, "block_size");
  EXPECT_EQ(report.needs_restart[0].to, "8");
  EXPECT_TRUE(report.applied.empty());
  EXPECT_EQ(report.version, 1);  // nothing applied: the same configuration
  EXPECT_EQ(e.config().block_size, 4);
  EXPECT_EQ(e.limits().block_size, 4);
}

TEST(ConfigReload, AnInvalidConfigurationChangesNothing) {
  Engine e = make_fake_engine({.optimizers = {{"priority", {}, true}}});
  const EngineConfig before = e.config();
  const std::vector<std::function<void(EngineConfig&)>> breakers = {
      [](EngineConfig& c) { c.optimizers = {{"priority", {{"no_such_knob", int64_t{1}}}, true}}; },
      [](EngineConfig& c) { c.optimizers = {{"no-such-optimizer", {}, true}}; },
      [](EngineConfig& c) { c.max_num_seqs = 0; },
  };
  for (const auto& breaks : breakers) {
    EngineConfig next = before;
    breaks(next);
    next.max_num_batched_tokens = 32;  // a valid change that must not apply either
    EXPECT_THROW(e.apply_config(next), Error);
    EXPECT_EQ(e.config_version(), 1);
    EXPECT_EQ(e.limits().max_num_batched_tokens, before.max_num_batched_tokens);
    EXPECT_EQ(e.scheduler().policies().queue->name(), "priority");
  }
}

TEST(ConfigReload, ALimitPastWhatTheRunnerAllocatedIsRefused) {
  EngineConfig c;
  c.max_model_len = 256;
  c.block_size = 4;
  c.max_num_seqs = 8;
  EngineParts parts;
  auto runner = std::make_unique<FakeModelRunner>(256, 4);
  runner->set_capacity({.max_num_seqs = 16, .max_num_batched_tokens = 4096, .max_model_len = 4096});
  parts.runner = std::move(runner);
  parts.clock = std::make_shared<FakeClock>();
  Engine e(c, std::move(parts));
  EngineConfig next = c;
  next.max_num_seqs = 32;
  EXPECT_THROW(e.apply_config(next), Error);
  EXPECT_EQ(e.limits().max_num_seqs, 8);
}

TEST(ConfigReload, ReloadingTheSameOptimizersKeepsAFallbackAndTheirState) {
  Engine e = make_fake_engine({.optimizers = {{"priority", {}, true}}});
  e.rollback_optimizers("test");
  const ConfigApplyReport report = e.apply_config(e.config());
  EXPECT_TRUE(report.applied.empty());
  EXPECT_EQ(e.scheduler().policies().queue->name(), "fcfs");
}

}  // namespace
}  // namespace optimate::testing
