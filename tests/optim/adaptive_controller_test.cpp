// The adaptive controller, tick by tick on hand-made metrics: which knob moves, in which
// direction, how far and how often; bounds, hysteresis and rate limits.
#include <gtest/gtest.h>

#include "core/error.h"
#include "optim/adaptive_controller.h"
#include "optim/bounded_knob.h"
#include "optim/kv_quant_policy.h"
#include "optim/registry.h"

namespace optimate::optim {
namespace {

Knobs knobs(int64_t seqs, int64_t tokens, int64_t capacity_seqs = 1 << 20) {
  Knobs k;
  k.max_num_seqs = seqs;
  k.max_num_batched_tokens = tokens;
  k.capacity_max_num_seqs = capacity_seqs;
  k.capacity_max_num_batched_tokens = 1 << 20;
  k.configured_max_num_seqs = 64;
  k.configured_max_num_batched_tokens = 2048;
  k.num_kv_blocks = 1000;
  return k;
}

// A queue behind a full batch, P99 TTFT at `ttft_ms`, P99 TPOT at `tpot_ms`.
MetricsView loaded(const Knobs& k, double ttft_ms, double tpot_ms, int64_t waiting = 20) {
  MetricsView m;
  m.num_running = k.max_num_seqs;
  m.num_waiting = waiting;
  m.kv_usage = 0.3;
  m.num_kv_blocks = 1000;
  m.last_step_num_tokens = k.max_num_batched_tokens;
  m.window.num_ttft_samples = 100;
  m.window.ttft_p99_ms = ttft_ms;
  m.window.num_tpot_samples = 100;
  m.window.tpot_p99_ms = tpot_ms;
  m.classes = {{0, m.num_running, waiting, 300, 0}};
  return m;
}

void apply(const KnobChanges& c, Knobs& k) {
  if (c.max_num_seqs) k.max_num_seqs = *c.max_num_seqs;
  if (c.max_num_batched_tokens) k.max_num_batched_tokens = *c.max_num_batched_tokens;
  if (c.policy) k.policy = *c.policy;
}

AdaptiveOptions targets(double ttft_ms, double tpot_ms) {
  AdaptiveOptions o;
  o.ttft_p99_ms = ttft_ms;
  o.tpot_p99_ms = tpot_ms;
  o.batch_wait = false;
  return o;
}

TEST(AdaptiveController, RaisesTheLimitsWhileTtftIsOverAndStopsAtTheBound) {
  AdaptiveController c(targets(500, 100));
  Knobs k = knobs(64, 2048, /*capacity_seqs=*/200);
  std::vector<int64_t> seqs;
  for (int i = 0; i < 40; ++i) {
    const KnobChanges ch = c.tick(loaded(k, 2000, 30), k);
    apply(ch, k);
    seqs.push_back(k.max_num_seqs);
    for (const KnobAction& a : ch.actions) EXPECT_FALSE(a.reason.empty());
  }
  // Up, by a quarter at a time, never past what the runner allocated (4 x 64 > 200).
  EXPECT_EQ(k.max_num_seqs, 200);
  EXPECT_EQ(k.max_num_batched_tokens, 4 * 2048);
  for (size_t i = 1; i < seqs.size(); ++i) {
    EXPECT_GE(seqs[i], seqs[i - 1]);
    EXPECT_LE(seqs[i], seqs[i - 1] * 5 / 4 + 1);
  }
  // Rate limit: the first move waits for the wish to repeat, then one move per cooldown.
  EXPECT_EQ(seqs[0], 64);
  int moves = 0;
  for (size_t i = 1; i < seqs.size(); ++i) moves += seqs[i] != seqs[i - 1];
  EXPECT_LE(moves, 40 / 3 + 1);
}

TEST(AdaptiveController, LowersForTpotAndDoesNotSwingBackInsideTheBand) {
  AdaptiveController c(targets(500, 50));
  Knobs k = knobs(256, 4096);
  for (int i = 0; i < 12; ++i) apply(c.tick(loaded(k, 100, 80), k), k);
  EXPECT_LT(k.max_num_seqs, 256);
  EXPECT_LT(k.max_num_batched_tokens, 4096);
  const Knobs lowered = k;
  // TTFT now between band x target and target, TPOT fine: neither direction is wanted.
  for (int i = 0; i < 20; ++i) apply(c.tick(loaded(k, 450, 45), k), k);
  EXPECT_EQ(k.max_num_seqs, lowered.max_num_seqs);
  EXPECT_EQ(k.max_num_batched_tokens, lowered.max_num_batched_tokens);
}

TEST(AdaptiveController, HoldsWhenBothTargetsAreMissed) {
  AdaptiveController c(targets(500, 50));
  Knobs k = knobs(128, 2048);
  for (int i = 0; i < 20; ++i) {
    const KnobChanges ch = c.tick(loaded(k, 3000, 90), k);
    EXPECT_FALSE(ch.max_num_seqs.has_value());
    EXPECT_FALSE(ch.max_num_batched_tokens.has_value());
  }
}

TEST(AdaptiveController, IgnoresPercentilesWithTooFewSamples) {
  AdaptiveOptions o = targets(500, 50);
  o.min_samples = 20;
  AdaptiveController c(o);
  Knobs k = knobs(128, 2048);
  MetricsView m = loaded(k, 100, 400, /*waiting=*/0);
  m.window.num_tpot_samples = 3;  // a handful of slow sequences say nothing yet
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(c.tick(m, k).max_num_seqs.has_value());
}

TEST(AdaptiveController, TheOldestWaitCountsBeforeAnyTtftSample) {
  AdaptiveController c(targets(500, 0));
  Knobs k = knobs(64, 2048);
  MetricsView m = loaded(k, 0, 0);
  m.window.num_ttft_samples = 0;
  m.oldest_waiting_ms = 1500;  // nobody got a first token yet, but one has waited 1.5 s
  KnobChanges ch;
  for (int i = 0; i < 3 && !ch.max_num_seqs; ++i) ch = c.tick(m, k);
  ASSERT_TRUE(ch.max_num_seqs.has_value());
  EXPECT_GT(*ch.max_num_seqs, 64);
}

TEST(AdaptiveController, LowersTheBatchWhenThePoolRunsDry) {
  AdaptiveController c(targets(0, 0));
  Knobs k = knobs(256, 2048);
  MetricsView m = loaded(k, 0, 0);
  m.kv_usage = 0.97;
  for (int i = 0; i < 6; ++i) {
    m.num_preemptions += 5;
    apply(c.tick(m, k), k);
  }
  EXPECT_LT(k.max_num_seqs, 256);
}

TEST(AdaptiveController, KvQuotaOnUnderPressureWithSeveralClassesOffBelowTheLowMark) {
  AdaptiveOptions o = targets(0, 0);
  AdaptiveController c(o);
  Knobs k = knobs(64, 2048);
  MetricsView m = loaded(k, 0, 0, 0);
  m.classes = {{3, 10, 0, 100, 0}, {1, 54, 0, 800, 700}};
  m.kv_usage = 0.95;
  for (int i = 0; i < 4; ++i) apply(c.tick(m, k), k);
  ASSERT_TRUE(k.policy.kv_quota.active());
  EXPECT_EQ(k.policy.kv_quota.reserve_blocks, 100);       // 10% of 1000
  EXPECT_EQ(k.policy.kv_quota.reserve_min_priority, EnginePriority{3});   // the most important class
  EXPECT_DOUBLE_EQ(k.policy.kv_quota.long_max_share, 0.5);
  // Between the marks: stays on (hysteresis).
  m.kv_usage = 0.8;
  for (int i = 0; i < 10; ++i) apply(c.tick(m, k), k);
  EXPECT_TRUE(k.policy.kv_quota.active());
  m.kv_usage = 0.5;
  for (int i = 0; i < 10; ++i) apply(c.tick(m, k), k);
  EXPECT_FALSE(k.policy.kv_quota.active());
  // One class: never a quota.
  m.classes = {{1, 64, 0, 900, 800}};
  m.kv_usage = 0.99;
  for (int i = 0; i < 10; ++i) apply(c.tick(m, k), k);
  EXPECT_FALSE(k.policy.kv_quota.active());
}

TEST(AdaptiveController, KvQuantStrengthensUnderPressureAndRelaxesAfter) {
  AdaptiveController c(targets(0, 0));
  Knobs k = knobs(64, 2048);
  k.kv_finest_precision = kv::KvPrecision::kInt4;
  MetricsView m = loaded(k, 0, 0);
  m.kv_usage = 0.95;
  std::vector<std::optional<kv::KvPrecision>> seen;
  for (int i = 0; i < 20; ++i) {
    m.num_preemptions += 2;
    const KnobChanges ch = c.tick(m, k);
    apply(ch, k);
    for (const KnobAction& a : ch.actions)
      if (a.knob == "kv_quant_level") seen.push_back(k.policy.kv_quant_precision);
  }
  // One level at a time, int8 first, and never finer than the cache holds.
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], kv::KvPrecision::kInt8);
  EXPECT_EQ(seen[1], kv::KvPrecision::kInt4);
  // Between the marks it holds; below kv_low it relaxes back to kv_quant's own settings.
  m.kv_usage = 0.8;
  for (int i = 0; i < 10; ++i) apply(c.tick(m, k), k);
  EXPECT_EQ(k.policy.kv_quant_precision, kv::KvPrecision::kInt4);
  m.kv_usage = 0.4;
  m.num_waiting = 0;
  for (int i = 0; i < 20; ++i) apply(c.tick(m, k), k);
  EXPECT_FALSE(k.policy.kv_quant_precision.has_value());
}

TEST(AdaptiveController, KvQuantStaysOnItsOwnWhereTheCacheHasOnePrecision) {
  AdaptiveController c(targets(0, 0));
  Knobs k = knobs(64, 2048);  // no finest precision: a static cache
  MetricsView m = loaded(k, 0, 0);
  m.kv_usage = 0.99;
  for (int i = 0; i < 10; ++i) {
    m.num_preemptions += 2;
    apply(c.tick(m, k), k);
  }
  EXPECT_FALSE(k.policy.kv_quant_precision.has_value());
  // An int8 cache: 8-bit is as far as it goes.
  AdaptiveController c8(targets(0, 0));
  Knobs k8 = knobs(64, 2048);
  k8.kv_finest_precision = kv::KvPrecision::kInt8;
  for (int i = 0; i < 20; ++i) {
    m.num_preemptions += 2;
    apply(c8.tick(m, k8), k8);
  }
  EXPECT_EQ(k8.policy.kv_quant_precision, kv::KvPrecision::kInt8);
}

TEST(AdaptiveController, KvQuantFollowsTheControllersLevelAndItsOwnThresholdsWithout) {
  KvQuantOptions o;
  o.precision = kv::KvPrecision::kInt4;
  o.activation_threshold = 1.0;  // never on its own: left to the controller
  o.deactivation_threshold = 0.9;
  o.keep_first_tokens = 0;
  o.keep_recent_tokens = 0;
  KvQuantPolicy policy(o);
  RequestView low;  // 64 tokens written in 4 full-precision blocks
  low.seq_id = 1;
  low.num_computed_tokens = 64;
  low.num_blocks = low.num_full_blocks = 4;
  RequestView high = low;
  high.seq_id = 2;
  high.metadata.priority = EnginePriority{1};
  const std::vector<RequestView> running = {low, high};
  SchedulerView view;
  view.now_ns = 1;
  view.running = running;
  view.kv.num_blocks = 100;
  view.kv.num_free_blocks = 5;
  view.kv.block_size = 16;
  view.kv.used = 0.95;
  view.kv.default_precision = kv::KvPrecision::kF32;
  view.kv.finest_precision = kv::KvPrecision::kInt4;
  const std::vector<RequestView> waiting = {high};  // an important request waits for room
  view.waiting = waiting;
  EXPECT_EQ(policy.precision_for(view, low), kv::KvPrecision::kF32);
  EXPECT_TRUE(policy.requantize(view).empty());
  view.now_ns = 2;
  view.knobs.kv_quant_precision = kv::KvPrecision::kInt8;
  // New blocks stay full precision whatever the level; written ones of eligible requests are
  // requantized to it.
  EXPECT_EQ(policy.precision_for(view, low), kv::KvPrecision::kF32);
  const auto orders = policy.requantize(view);
  ASSERT_EQ(orders.size(), 1u);
  EXPECT_EQ(orders[0].seq_id, 1);  // priority_aware: not the important one
  EXPECT_EQ(orders[0].precision, kv::KvPrecision::kInt8);
  view.now_ns = 3;
  view.knobs.kv_quant_precision.reset();
  EXPECT_TRUE(policy.requantize(view).empty());
}

TEST(AdaptiveController, BatchHoldFollowsTheArrivalRateAndIsOffAtLowRate) {
  AdaptiveOptions o;
  o.batch_max_wait_ms = 50;
  o.batch_arrivals = 4;
  AdaptiveController c(o);
  Knobs k = knobs(64, 2048);
  MetricsView m;
  m.window.arrival_rate_per_s = 5;  // 0.25 arrivals in 50 ms: a hold gathers nothing
  apply(c.tick(m, k), k);
  ASSERT_TRUE(k.policy.batch_max_wait_ms.has_value());
  EXPECT_EQ(*k.policy.batch_max_wait_ms, 0.0);
  m.window.arrival_rate_per_s = 400;  // 4 arrivals in 10 ms
  for (int i = 0; i < 4; ++i) apply(c.tick(m, k), k);
  EXPECT_NEAR(*k.policy.batch_max_wait_ms, 10.0, 1e-9);
  m.window.arrival_rate_per_s = 30;  // between off (< 20/s) and on (>= 40/s): stays on, capped
  for (int i = 0; i < 4; ++i) apply(c.tick(m, k), k);
  EXPECT_NEAR(*k.policy.batch_max_wait_ms, 50.0, 1e-9);
}

TEST(AdaptiveController, OptionsAreCheckedAndNamed) {
  const OptimizerRegistry r = OptimizerRegistry::with_builtin();
  EXPECT_NO_THROW(r.build({"adaptive", {{"ttft_p99_ms", 500.0}, {"tpot_p99_ms", int64_t{50}}}}));
  try {
    r.build({"adaptive", {{"kv_low", 0.95}}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_low"), std::string::npos) << e.what();
  }
  EXPECT_THROW(r.build({"adaptive", {{"max_num_seqs_min", int64_t{64}}, {"max_num_seqs_max", int64_t{32}}}}), Error);
  EXPECT_THROW(r.build({"adaptive", {{"no_such_knob", true}}}), Error);
  const PolicySet set = r.build({"adaptive", {}});
  ASSERT_NE(set.controller, nullptr);
  EXPECT_EQ(set.queue, nullptr);
}

TEST(BoundedKnob, ReversalsWaitTwiceTheCooldown) {
  KnobRule rule;
  rule.min = 1;
  rule.max = 1000;
  rule.confirm_intervals = 1;
  rule.cooldown_intervals = 2;
  BoundedKnob knob("k", rule);
  double v = 100;
  int ticks_to_move_back = 0;
  ASSERT_TRUE(knob.step(v, Wish::kRaise));
  v = 125;
  for (int i = 1; i <= 10; ++i) {
    if (auto next = knob.step(v, Wish::kLower)) {
      ticks_to_move_back = i;
      v = *next;
      break;
    }
  }
  EXPECT_EQ(ticks_to_move_back, 3);  // a plain cooldown of 2 ticks, then the move
  EXPECT_EQ(knob.num_reversals(), 1);
  // After a reversal, the next move waits twice as long.
  int ticks = 0;
  for (int i = 1; i <= 10; ++i)
    if (knob.step(v, Wish::kRaise)) {
      ticks = i;
      break;
    }
  EXPECT_EQ(ticks, 5);
}

}  // namespace
}  // namespace optimate::optim
