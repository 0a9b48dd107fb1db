// The report's figures, built from run results: latency and queue-time CDFs per configuration, output
// throughput and queue length over time, and sweep curves.
#pragma once

#include <string>
#include <vector>

#include "bench/run_result.h"
#include "bench/summary.h"

namespace optimate::bench {

// kQueue: arrival to first admission, for targets that report it (in-process, sim).
enum class LatencyMetric { kTtft, kTpot, kItl, kE2e, kQueue };

// Empirical CDF of one latency per configuration (log x when the values span > 2 decades).
std::string plot_latency_cdf(const std::vector<RunResult>& runs, LatencyMetric metric);

// Output tokens per second in bins of `bin_s` (0: 1/60 of the longest run, at least 0.1 s).
std::string plot_throughput_over_time(const std::vector<RunResult>& runs, double bin_s = 0.0);

// Requests waiting for admission after each step; requests in flight (sent, not finished)
// when a run has no step samples (an HTTP target).
std::string plot_queue_over_time(const std::vector<RunResult>& runs);

// One curve per metric over the swept values of `knob` (e.g. "predictive.max_wait_ms").
struct SweepMetric {
  std::string name{};  // legend: "Output tok/s", "P99 TTFT (ms)"
  double (*get)(const RunSummary&);
};
std::string plot_sweep(const std::string& knob, const std::vector<double>& values,
                       const std::vector<RunSummary>& summaries, const std::vector<SweepMetric>& metrics,
                       const std::string& y_label);

}  // namespace optimate::bench
