// Predictive batching with a fake clock: it gathers a fuller batch when arrivals are dense,
// never holds a request past max_wait_ms, and stays out of the way at low QPS or while
// requests are running.
#include <gtest/gtest.h>

#include "optim/predictive_batch_policy.h"
#include "optim/sched_harness.h"

namespace optimate::testing {
namespace {

constexpr int64_t kMs = 1'000'000;

sched::SchedulerConfig config() {
  sched::SchedulerConfig c;
  c.max_num_seqs = 64;
  c.max_num_batched_tokens = 1024;
  c.max_model_len = 64;
  c.block_size = 4;
  c.num_kv_blocks = 1024;
  c.eos_token_ids = {0};
  return c;
}

struct Arrivals {
  int64_t gap_ns = 0;    // between arrivals of a burst
  int64_t count = 0;
  int64_t max_tokens = 1;
  int64_t burst = 1;     // requests per burst
  int64_t period_ns = 0; // from one burst to the next (burst > 1)

  int64_t arrival_ns(int64_t k) const {
    return burst == 1 ? k * gap_ns : (k / burst) * period_ns + (k % burst) * gap_ns;
  }
};

// Requests arrive every gap_ns; the harness steps whenever the scheduler has something to
// run and otherwise jumps to the next arrival or the policy's retry time, as the engine does.
Timeline drive(SchedHarness& h, const Arrivals& a) {
  int64_t next = 0;
  while (next < a.count || h.scheduler().has_unfinished()) {
    while (next < a.count && h.clock().now_ns() >= a.arrival_ns(next)) {
      // Stamped with its exact arrival time, as a front end would.
      h.add("r" + std::to_string(next), 8, a.max_tokens, 0, a.arrival_ns(next));
      ++next;
    }
    const sched::StepPlan plan = h.step();
    if (!plan.empty()) continue;
    int64_t wake = next < a.count ? a.arrival_ns(next) : INT64_MAX;
    if (plan.retry_at_ns > 0) wake = std::min(wake, plan.retry_at_ns);
    EXPECT_NE(wake, INT64_MAX);
    if (wake == INT64_MAX) break;
    h.clock().set_ns(std::max(wake, h.clock().now_ns()));
  }
  return h.timeline();
}

OptimizerSpec predictive(double max_wait_ms, OptionMap extra = {}) {
  extra["max_wait_ms"] = max_wait_ms;
  extra.emplace("rate_window_ms", 200.0);
  return {"predictive", std::move(extra)};
}

int64_t max_admission_delay_ns(const Timeline& t) {
  int64_t worst = 0;
  for (const auto& [id, arrival] : t.arrival_ns) worst = std::max(worst, t.first_scheduled_ns.at(id) - arrival);
  return worst;
}

double mean_batch(const Timeline& t) {
  double sum = 0;
  for (int64_t b : t.batch_sizes) sum += static_cast<double>(b);
  return t.batch_sizes.empty() ? 0.0 : sum / static_cast<double>(t.batch_sizes.size());
}

// Bursts of 10 requests 1 ms apart every 40 ms (250 QPS), one-token requests and 20 ms
// steps: launching at once runs the first of each burst alone (batches 1, 9, 1, 9, ...),
// although 5 arrive per step time.
constexpr Arrivals kDense{1 * kMs, 400, 1, 10, 40 * kMs};

TEST(PredictiveBatching, WaitsForAFullerBatchWhenArrivalsAreDense) {
  SchedHarness base(config(), {}, 20 * kMs);
  const Timeline b = drive(base, kDense);
  SchedHarness h(config(), build_optimizers({predictive(30.0)}), 20 * kMs);
  const Timeline p = drive(h, kDense);
  const auto& policy = *h.scheduler().policies().batch;
  EXPECT_GT(counter(policy, "waits"), 0);
  EXPECT_GT(counter(policy, "batch_gain_total"), 0);
  EXPECT_GT(mean_batch(p), mean_batch(b));
  EXPECT_LT(p.batch_sizes.size(), b.batch_sizes.size());  // fewer, fuller steps
}

TEST(PredictiveBatching, WaitNeverExceedsMaxWait) {
  for (double max_wait_ms : {10.0, 30.0, 50.0, 100.0}) {
    SchedHarness h(config(), build_optimizers({predictive(max_wait_ms)}), 20 * kMs);
    const Timeline t = drive(h, kDense);
    const auto& policy = *h.scheduler().policies().batch;
    EXPECT_LE(counter(policy, "wait_ms_max"), max_wait_ms) << max_wait_ms;
    // From arrival to admission: the policy's wait, or one step when it arrived mid-step.
    EXPECT_LE(max_admission_delay_ns(t), std::max<int64_t>(max_wait_ms * kMs, 20 * kMs)) << max_wait_ms;
    EXPECT_GT(counter(policy, "waits"), 0) << max_wait_ms;
  }
}

TEST(PredictiveBatching, SwitchesOffAtLowQps) {
  // One request per 500 ms (2 QPS): no arrival is expected within 50 ms, so it never waits
  // and every request starts the moment it arrives, as with the baseline.
  SchedHarness h(config(), build_optimizers({predictive(50.0)}), 20 * kMs);
  const Timeline t = drive(h, {500 * kMs, 20, 3});
  const auto& policy = *h.scheduler().policies().batch;
  EXPECT_EQ(counter(policy, "waits"), 0);
  EXPECT_GT(counter(policy, "launches_low_rate"), 0);
  EXPECT_EQ(max_admission_delay_ns(t), 0);
}

TEST(PredictiveBatching, NeverHoldsWhileRequestsRun) {
  // Long requests keep the engine busy: new arrivals join the next step at once.
  SchedHarness h(config(), build_optimizers({predictive(50.0)}), 20 * kMs);
  const Timeline t = drive(h, {2 * kMs, 60, 30});
  const auto& policy = *h.scheduler().policies().batch;
  EXPECT_LE(counter(policy, "waits"), 1);  // only before the first request ever ran
  for (const auto& [id, arrival] : t.arrival_ns)
    if (id != "r0") EXPECT_LE(t.first_scheduled_ns.at(id) - arrival, 20 * kMs) << id;
}

TEST(PredictiveBatching, NoGainNoWait) {
  // Arrivals every 40 ms and 20 ms steps: fewer than one arrival per step, so a wait would
  // cost more than the batch it buys, even though one is expected within max_wait_ms.
  SchedHarness h(config(), build_optimizers({predictive(100.0)}), 20 * kMs);
  drive(h, {40 * kMs, 50, 1});
  const auto& policy = *h.scheduler().policies().batch;
  EXPECT_EQ(counter(policy, "waits"), 0);
  EXPECT_GT(counter(policy, "launches_no_gain"), 0);
}

TEST(PredictiveBatching, ArrivalRateEstimateTracksTheLoad) {
  optim::ArrivalRateEstimator rate(1000.0);
  for (int i = 0; i < 400; ++i) rate.observe(i * 10 * kMs);  // 100/s for 4 s
  EXPECT_NEAR(rate.rate_per_s(3990 * kMs), 100.0, 10.0);
  EXPECT_LT(rate.rate_per_s(8000 * kMs), 2.0);  // 4 s of silence later
}

}  // namespace
}  // namespace optimate::testing
