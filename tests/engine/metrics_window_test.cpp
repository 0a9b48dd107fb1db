// The controller's window: rates over the time the engine has run, TTFT from each request's
// arrival, vLLM's TPOT for the sequences that finished, and old buckets sliding out.
#include <gtest/gtest.h>

#include "engine/metrics_window.h"

namespace optimate {
namespace {

constexpr int64_t kMs = 1'000'000;

sched::RequestOutput token(const std::string& id, bool finished = false) {
  sched::RequestOutput o;
  o.request_id = id;
  o.new_token_ids = {7};
  o.finished = finished;
  return o;
}

TEST(MetricsWindow, TtftTpotAndRatesOverTheWindow) {
  MetricsWindow w(1000 * kMs, 100 * kMs);
  // 81 requests, one every 10 ms, each answered 50 ms after it arrived, then 4 more tokens
  // 20 ms apart: everything within the first second.
  for (int i = 0; i < 81; ++i) {
    const int64_t t = i * 10 * kMs;
    const std::string id = "r" + std::to_string(i);
    w.on_arrival(id, 1, t, t);
  }
  for (int i = 0; i < 81; ++i) {
    const int64_t t = i * 10 * kMs + 50 * kMs;
    const std::string id = "r" + std::to_string(i);
    w.on_output(token(id), t);
    for (int k = 1; k <= 4; ++k) w.on_output(token(id, k == 4), t + k * 20 * kMs);
  }
  const optim::WindowMetrics m = w.snapshot(1000 * kMs);
  EXPECT_EQ(m.num_arrivals, 81);
  EXPECT_NEAR(m.arrival_rate_per_s, 81.0, 1e-9);
  EXPECT_EQ(m.num_ttft_samples, 81);
  EXPECT_NEAR(m.ttft_p99_ms, 50.0, 1e-6);
  EXPECT_EQ(m.num_tpot_samples, 81);
  EXPECT_NEAR(m.tpot_p50_ms, 20.0, 1e-6);

  // A second later nothing new happened: the old buckets have left the window.
  const optim::WindowMetrics later = w.snapshot(2200 * kMs);
  EXPECT_EQ(later.num_arrivals, 0);
  EXPECT_EQ(later.num_ttft_samples, 0);
  EXPECT_EQ(later.ttft_p99_ms, 0.0);
}

TEST(MetricsWindow, StepsGiveBusyTimeAndThroughput) {
  MetricsWindow w(1000 * kMs, 100 * kMs);
  for (int i = 1; i <= 50; ++i) w.on_step(i * 20 * kMs, 10 * kMs, 100, 8);
  const optim::WindowMetrics m = w.snapshot(1000 * kMs);
  EXPECT_EQ(m.num_steps, 50);
  EXPECT_NEAR(m.step_ms_mean, 10.0, 1e-9);
  EXPECT_NEAR(m.busy_fraction, 0.5, 0.03);
  EXPECT_NEAR(m.generated_tokens_per_s, 400.0, 25.0);
}

TEST(MetricsWindow, AnAbortedRequestLeavesNoState) {
  MetricsWindow w(1000 * kMs, 100 * kMs);
  w.on_arrival("gone", 2, 0, 0);
  sched::RequestOutput o;
  o.request_id = "gone";
  o.finished = true;
  for (int64_t i = 0; i < 2; ++i) {
    o.index = i;
    w.on_output(o, 5 * kMs);
  }
  // A later request of the same id starts afresh.
  w.on_arrival("gone", 1, 10 * kMs, 10 * kMs);
  w.on_output(token("gone"), 30 * kMs);
  EXPECT_NEAR(w.snapshot(40 * kMs).ttft_p99_ms, 20.0, 1e-9);
}

}  // namespace
}  // namespace optimate
