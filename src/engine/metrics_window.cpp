#include "engine/metrics_window.h"

#include <algorithm>
#include <cmath>

namespace optimate {
namespace {

// Nearest-rank percentile; 0 for no samples.
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  const size_t k = std::clamp<size_t>(rank, 1, v.size()) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

MetricsWindow::MetricsWindow(int64_t window_ns, int64_t bucket_ns)
    : window_ns_(std::max<int64_t>(window_ns, 1)), bucket_ns_(std::clamp<int64_t>(bucket_ns, 1, window_ns_)) {}

MetricsWindow::Bucket& MetricsWindow::bucket(int64_t now_ns) {
  if (first_event_ns_ < 0) first_event_ns_ = now_ns;
  if (buckets_.empty() || now_ns >= buckets_.back().start_ns + bucket_ns_) {
    Bucket b;
    b.start_ns = now_ns - (now_ns - first_event_ns_) % bucket_ns_;
    buckets_.push_back(std::move(b));
  }
  while (buckets_.size() > 1 && buckets_.front().start_ns + bucket_ns_ <= now_ns - window_ns_) buckets_.pop_front();
  return buckets_.back();
}

void MetricsWindow::on_arrival(const std::string& request_id, int64_t num_seqs, int64_t arrival_ns,
                               int64_t now_ns) {
  ++bucket(now_ns).arrivals;
  pending_[request_id] = {arrival_ns, std::max<int64_t>(1, num_seqs)};
}

void MetricsWindow::on_output(const sched::RequestOutput& out, int64_t now_ns) {
  const std::string key = out.request_id + '#' + std::to_string(out.index);
  auto live = live_.find(key);
  const auto num_new = static_cast<int64_t>(out.new_token_ids.size());
  if (live == live_.end() && num_new > 0) {
    auto p = pending_.find(out.request_id);
    if (p != pending_.end()) {
      if (out.index == 0)
        bucket(now_ns).ttft_ms.push_back(static_cast<double>(now_ns - p->second.arrival_ns) * 1e-6);
      live = live_.emplace(key, Live{now_ns, num_new}).first;
      if (--p->second.num_unstarted == 0) pending_.erase(p);
    }
  } else if (live != live_.end()) {
    live->second.num_tokens += num_new;
  }
  if (!out.finished) return;
  if (live != live_.end()) {
    // vLLM's TPOT: (last token - first token) / (tokens - 1).
    if (live->second.num_tokens >= 2)
      bucket(now_ns).tpot_ms.push_back(static_cast<double>(now_ns - live->second.first_token_ns) * 1e-6 /
                                       static_cast<double>(live->second.num_tokens - 1));
    live_.erase(live);
  } else if (auto p = pending_.find(out.request_id); p != pending_.end() && --p->second.num_unstarted <= 0) {
    pending_.erase(p);  // ended without a token (aborted while waiting)
  }
}

void MetricsWindow::on_step(int64_t now_ns, int64_t step_ns, int64_t prompt_tokens, int64_t generated_tokens) {
  Bucket& b = bucket(now_ns);
  b.step_ms.push_back(static_cast<double>(step_ns) * 1e-6);
  b.busy_ns += step_ns;
  b.prompt_tokens += prompt_tokens;
  b.generated_tokens += generated_tokens;
}

void MetricsWindow::on_step(const StepRecord& step) {
  int64_t generated = 0;
  for (const sched::RequestOutput& o : step.outputs) generated += static_cast<int64_t>(o.new_token_ids.size());
  on_step(step.end_ns, step.end_ns - step.start_ns, step.prompt_tokens, generated);
  for (const sched::RequestOutput& o : step.outputs) on_output(o, step.end_ns);
}

optim::WindowMetrics MetricsWindow::snapshot(int64_t now_ns) const {
  optim::WindowMetrics w;
  w.window_ms = static_cast<double>(window_ns_) * 1e-6;
  if (first_event_ns_ < 0) return w;
  const int64_t from_ns = now_ns - window_ns_;
  // Until the engine has run a whole window, rates are over the time it has run.
  const double span_s = static_cast<double>(std::clamp<int64_t>(now_ns - first_event_ns_, bucket_ns_, window_ns_)) * 1e-9;
  std::vector<double> ttft, tpot, steps;
  int64_t busy_ns = 0, prompt = 0, generated = 0;
  for (const Bucket& b : buckets_) {
    if (b.start_ns + bucket_ns_ <= from_ns) continue;
    w.num_arrivals += b.arrivals;
    ttft.insert(ttft.end(), b.ttft_ms.begin(), b.ttft_ms.end());
    tpot.insert(tpot.end(), b.tpot_ms.begin(), b.tpot_ms.end());
    steps.insert(steps.end(), b.step_ms.begin(), b.step_ms.end());
    busy_ns += b.busy_ns;
    prompt += b.prompt_tokens;
    generated += b.generated_tokens;
  }
  w.arrival_rate_per_s = static_cast<double>(w.num_arrivals) / span_s;
  w.num_ttft_samples = static_cast<int64_t>(ttft.size());
  w.ttft_p50_ms = percentile(ttft, 50);
  w.ttft_p99_ms = percentile(ttft, 99);
  w.num_tpot_samples = static_cast<int64_t>(tpot.size());
  w.tpot_p50_ms = percentile(tpot, 50);
  w.tpot_p99_ms = percentile(tpot, 99);
  w.num_steps = static_cast<int64_t>(steps.size());
  if (!steps.empty()) {
    double sum = 0.0;
    for (double s : steps) sum += s;
    w.step_ms_mean = sum / static_cast<double>(steps.size());
  }
  w.step_ms_p99 = percentile(std::move(steps), 99);
  w.busy_fraction = std::min(1.0, static_cast<double>(busy_ns) * 1e-9 / span_s);
  w.generated_tokens_per_s = static_cast<double>(generated) / span_s;
  w.prompt_tokens_per_s = static_cast<double>(prompt) / span_s;
  return w;
}

}  // namespace optimate
