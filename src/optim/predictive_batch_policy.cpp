#include "optim/predictive_batch_policy.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/logging.h"
#include "optim/registry.h"

namespace optimate::optim {

PredictiveOptions PredictiveOptions::read(OptionReader& r) {
  PredictiveOptions o;
  o.max_wait_ms = r.get_ms("max_wait_ms", o.max_wait_ms, 60'000.0);  // longer is a queue, not a batch
  if (o.max_wait_ms < 0)
    fail(ErrorCode::kInvalidArgument, "optimizers.predictive.max_wait_ms must be >= 0, got {}", o.max_wait_ms);
  o.rate_window_ms = r.get_double("rate_window_ms", o.rate_window_ms);
  if (o.rate_window_ms <= 0)
    fail(ErrorCode::kInvalidArgument, "optimizers.predictive.rate_window_ms must be > 0, got {}",
         o.rate_window_ms);
  o.step_time_alpha = r.get_double("step_time_alpha", o.step_time_alpha);
  if (o.step_time_alpha <= 0 || o.step_time_alpha > 1)
    fail(ErrorCode::kInvalidArgument, "optimizers.predictive.step_time_alpha must be in (0, 1], got {}",
         o.step_time_alpha);
  o.idle_only = r.get_bool("idle_only", o.idle_only);
  o.require_gain = r.get_bool("require_gain", o.require_gain);
  return o;
}

PredictiveBatchPolicy::PredictiveBatchPolicy(PredictiveOptions options)
    : options_(options), rate_(options.rate_window_ms) {}

void PredictiveBatchPolicy::observe(const SchedulerView& view) {
  // Sequence ids are never reused and grow with submission: an id above the largest seen is a
  // new arrival. Only the first sample of a request counts as an arrival.
  std::vector<int64_t> arrivals;
  int64_t max_id = max_seen_seq_;
  for (const RequestView& r : view.waiting) {
    if (r.seq_id <= max_seen_seq_) continue;
    max_id = std::max(max_id, r.seq_id);
    if (r.seq_index == 0) arrivals.push_back(r.arrival_ns);
  }
  max_seen_seq_ = max_id;
  std::sort(arrivals.begin(), arrivals.end());
  for (int64_t t : arrivals) rate_.observe(t);
  if (view.last_step_ns > 0) {
    const double t = static_cast<double>(view.last_step_ns);
    step_ns_ = step_ns_ == 0.0 ? t : options_.step_time_alpha * t + (1 - options_.step_time_alpha) * step_ns_;
  }
}

BatchDecision PredictiveBatchPolicy::launch(const SchedulerView& view, bool at_deadline) {
  if (holding_) {
    const double waited_ms = static_cast<double>(view.now_ns - hold_start_ns_) * 1e-6;
    wait_ms_total_ += waited_ms;
    wait_ms_max_ = std::max(wait_ms_max_, waited_ms);
    const int64_t gained = static_cast<int64_t>(view.waiting.size()) - hold_start_waiting_;
    batch_gain_total_ += std::max<int64_t>(0, gained);
    ++(at_deadline ? launches_at_deadline_ : launches_early_);
    spdlog::debug("predictive: launching {} requests after waiting {:.1f} ms (+{})",
                  view.waiting.size(), waited_ms, gained);
    holding_ = false;
  }
  return {};
}

BatchDecision PredictiveBatchPolicy::decide(const SchedulerView& view) {
  observe(view);
  const int64_t now = view.now_ns;
  last_rate_ = rate_.rate_per_s(now);
  if (view.waiting.empty()) return launch(view);
  // A controller may set the longest hold from the arrival rate (PolicyKnobs).
  const double max_wait_ms = view.knobs.batch_max_wait_ms.value_or(options_.max_wait_ms);
  const int64_t max_wait_ns = static_cast<int64_t>(max_wait_ms * 1e6);
  int64_t oldest_ns = now;
  int64_t num_tokens = 0;
  for (const RequestView& r : view.waiting) {
    // A preempted sequence resuming gains nothing from company: never hold it.
    if (r.num_preemptions > 0 || r.num_output_tokens > 0) return launch(view);
    oldest_ns = std::min(oldest_ns, r.arrival_ns);
    num_tokens += r.num_prompt_tokens - r.num_computed_tokens;
  }
  const int64_t deadline_ns = oldest_ns + max_wait_ns;
  if (now >= deadline_ns) return launch(view, true);
  const int64_t batch = static_cast<int64_t>(view.waiting.size() + view.running.size());
  if (batch >= view.max_num_seqs || num_tokens >= view.token_budget_left)
    return launch(view);
  // A hold, once worth starting, stays worth it: (b + λw) / (T + w) moves monotonically in
  // w, so it runs to the deadline unless the batch fills first.
  if (holding_) return {false, deadline_ns};
  if (last_rate_ * max_wait_ms * 1e-3 < 1.0) {
    ++launches_low_rate_;
    return launch(view);
  }
  if (options_.idle_only && !view.running.empty()) return launch(view);
  // No step seen yet: no evidence that waiting pays, so do not.
  if (options_.require_gain &&
      (step_ns_ == 0.0 || last_rate_ * step_ns_ * 1e-9 <= static_cast<double>(batch)))
  {
    ++launches_no_gain_;
    return launch(view);
  }
  holding_ = true;
  hold_start_ns_ = now;
  hold_start_waiting_ = static_cast<int64_t>(view.waiting.size());
  ++waits_;
  spdlog::debug("predictive: holding {} requests (rate {:.1f}/s, step {:.2f} ms, deadline in {:.1f} ms)",
                view.waiting.size(), last_rate_, step_ns_ * 1e-6, (deadline_ns - now) * 1e-6);
  return {false, deadline_ns};
}

std::vector<PolicyCounter> PredictiveBatchPolicy::counters() const {
  return {{"waits", static_cast<double>(waits_)},
          {"wait_ms_total", wait_ms_total_},
          {"wait_ms_max", wait_ms_max_},
          {"batch_gain_total", static_cast<double>(batch_gain_total_)},
          {"launches_at_deadline", static_cast<double>(launches_at_deadline_)},
          {"launches_batch_full", static_cast<double>(launches_early_)},
          {"launches_low_rate", static_cast<double>(launches_low_rate_)},
          {"launches_no_gain", static_cast<double>(launches_no_gain_)},
          {"arrival_rate_per_s", last_rate_},
          {"step_ms", step_ns_ * 1e-6}};
}

}  // namespace optimate::optim
