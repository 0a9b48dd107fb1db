// Predictive batching (the seed's section 3.1.2): hold new requests back for at most
// max_wait_ms when more are about to arrive and a fuller batch is worth the wait.
//
// Under continuous batching a request that arrives while others run joins the next step
// anyway, so holding it back cannot enlarge any batch: it only delays it (and leaves compute
// of the decode-only step unused). The policy therefore holds only while nothing is running
// (idle_only), where launching now means a step for the few requests at hand. With the step
// time T (an EWMA of recent steps), the arrival rate λ (an EWMA over rate_window_ms) and b
// requests queued, a wait w gathers λ·w more; if step time hardly depends on batch size, the
// batch's rate goes from b/T to (b + λw)/(T + w), a gain exactly when λ·T > b: more arrivals
// per step than requests at hand. That ratio is monotonic in w, so a hold, once started, runs
// to the deadline unless the batch fills. It launches at once when
//   - an arrival is not even expected within max_wait_ms (λ·max_wait < 1: low QPS, off),
//   - the batch is full (max_num_seqs, or the token budget is covered),
//   - a queued request is a preempted one resuming,
//   - or the oldest queued request has waited max_wait_ms since its arrival (the bound).
// require_gain = false drops the λ·T > b test and idle_only = false holds even while
// requests run: the seed's plain "wait for a fuller batch", kept to measure what it costs.
// A controller's batch_max_wait_ms (the view's PolicyKnobs) replaces max_wait_ms.
#pragma once

#include <cstdint>

#include "optim/api/policies.h"
#include "optim/arrival_rate.h"

namespace optimate::optim {

class OptionReader;

struct PredictiveOptions {
  double max_wait_ms = 50.0;
  double rate_window_ms = 1000.0;
  double step_time_alpha = 0.2;  // EWMA weight of the newest step
  bool idle_only = true;
  bool require_gain = true;

  static PredictiveOptions read(OptionReader& reader);
};

class PredictiveBatchPolicy final : public BatchPolicy {
 public:
  explicit PredictiveBatchPolicy(PredictiveOptions options);
  std::string_view name() const override { return "predictive"; }
  BatchDecision decide(const SchedulerView& view) override;
  // waits (hold episodes), wait_ms_total, wait_ms_max, batch_gain_total (requests that
  // arrived during waits), launches_at_deadline and launches_batch_full (how holds ended),
  // launches_low_rate and launches_no_gain (admissions it decided not to hold), and the
  // current estimates arrival_rate_per_s and step_ms.
  std::vector<PolicyCounter> counters() const override;

  double arrival_rate_per_s(int64_t now_ns) const { return rate_.rate_per_s(now_ns); }

 private:
  void observe(const SchedulerView& view);
  // Ends a hold, if any, and admits.
  BatchDecision launch(const SchedulerView& view, bool at_deadline = false);

  PredictiveOptions options_;
  ArrivalRateEstimator rate_;
  double step_ns_ = 0.0;  // 0 until a step has been seen
  int64_t max_seen_seq_ = -1;
  double last_rate_ = 0.0;
  // The current hold, if any.
  bool holding_ = false;
  int64_t hold_start_ns_ = 0;
  int64_t hold_start_waiting_ = 0;
  // Counters.
  int64_t waits_ = 0;
  double wait_ms_total_ = 0.0;
  double wait_ms_max_ = 0.0;
  int64_t batch_gain_total_ = 0;
  int64_t launches_at_deadline_ = 0;
  int64_t launches_low_rate_ = 0;
  int64_t launches_no_gain_ = 0;
  int64_t launches_early_ = 0;  // holds ended by a full batch or a resuming request
};

}  // namespace optimate::optim
