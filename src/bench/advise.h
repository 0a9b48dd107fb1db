// `optimate advise`: which optimizers fit a workload. It reads the traffic's traits (the
// questions of the seed's decision guide, section 5.3: interactive or batch, priorities
// present, how regular the arrivals are, how widely request lengths vary; and from a run of the
// configuration as given, whether memory runs short and whether the engine is compute-bound),
// picks the candidate configurations the guide points to, runs each on the simulated backend,
// and recommends the one that meets the SLO with the most throughput, with the comparison table
// that justifies it. What the simulator cannot rank (kernel variants) is named with the
// measurements behind it and the command that measures it on a real backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/cost_model.h"
#include "bench/run_result.h"
#include "bench/summary.h"
#include "bench/workload.h"
#include "config/engine_config.h"

namespace optimate::bench {

// The guide's thresholds, each grounded in docs/optimizers.md ("Where the guide's thresholds
// come from"), in one table.
struct GuideThresholds {
  // Arrival gaps' coefficient of variation above which arrivals are bursty: Poisson loads
  // measure 0.89-0.99 (sampling noise below 1), the project's burst loads 1.21-1.24.
  double bursty_arrival_cv = 1.15;
  // Predictive batching's hold: the measured knee of GPU busy time against TTFT lies between
  // 10 and 30 ms (benchmarks.md, "max_wait_ms sweep"): its low end for interactive traffic,
  // its high end for batch work (past it busy time stays flat while TTFT keeps rising).
  double predictive_interactive_wait_ms = 10.0;
  double predictive_batch_wait_ms = 30.0;
  // KV usage of the default run that counts as memory running short (any preemption does too).
  double kv_short_usage = 0.9;
  // P99 over median of a request's tokens (prompt + max output) past which lengths vary widely.
  double wide_length_spread = 4.0;
  // The default run's device is saturated when busy at least this share of the run (then a
  // batch hold has no idle time to fill: predictive's sweep gave rows equal to the baseline's);
  // it counts as compute-bound when also `compute_bound_share` of that busy time is in steps past
  // the roofline's ridge.
  double saturated_busy_share = 0.9;
  double compute_bound_share = 0.5;
};
inline constexpr GuideThresholds kGuide{};

struct SloTargets {
  double ttft_p99_ms = 0.0;  // 0: none
  double tpot_p99_ms = 0.0;
  bool any() const { return ttft_p99_ms > 0 || tpot_p99_ms > 0; }
};

// "ttft_p99_ms=500,tpot_p99_ms=50": Error(kInvalidArgument) naming a bad key or value.
SloTargets parse_slo(const std::string& text);

struct WorkloadTraits {
  int64_t num_requests = 0;
  double duration_s = 0.0;        // first to last arrival
  double mean_rate_per_s = 0.0;
  double arrival_cv = 0.0;        // coefficient of variation of the gaps: 1 Poisson, > 1.15 bursty
  bool offline = false;           // every request at once
  std::vector<int64_t> priorities;  // distinct values, most important first
  double mean_prompt_tokens = 0.0;
  double mean_output_tokens = 0.0;
  double length_spread = 0.0;     // P99 / median of a request's prompt + max output tokens
  // From the default configuration's run (0 before it).
  double max_kv_usage = 0.0;
  int64_t default_preemptions = 0;
  double busy_fraction = 0.0;        // share of the run the device was busy
  double ridge_tokens = 0.0;         // the profile's roofline ridge, in tokens per step
  double compute_bound_share = 0.0;  // of the busy time, the share in steps past the ridge

  bool interactive(const SloTargets& slo) const { return slo.any(); }
  bool regular() const { return !offline && arrival_cv <= kGuide.bursty_arrival_cv; }
  bool memory_pressure() const { return max_kv_usage >= kGuide.kv_short_usage || default_preemptions > 0; }
  bool saturated() const { return busy_fraction >= kGuide.saturated_busy_share; }
  bool lengths_vary() const { return length_spread >= kGuide.wide_length_spread; }
  bool compute_bound() const { return saturated() && compute_bound_share >= kGuide.compute_bound_share; }
};

struct Candidate {
  std::string label;
  std::string why;  // the decision guide's reason for trying it
  EngineConfig config;
};

struct AdviceRow {
  Candidate candidate;
  RunSummary summary;
  bool meets_slo = false;
  double worst_ratio = 0.0;  // max(latency / target) over the targets (0 without targets)
};

struct Advice {
  SloTargets slo;
  WorkloadTraits traits;
  std::string target;  // "sim h200-llama3-8b-calibrated"
  std::vector<AdviceRow> rows;
  size_t recommended = 0;
  std::string verdict;  // one line: why that row
  // The guide's branches the table cannot rank, each with what the project measured of it.
  std::vector<std::string> considered;
};

// The traits a workload shows before any run (the default run's figures are 0).
WorkloadTraits workload_traits(const Workload& workload);
// Adds what the default configuration's run shows: KV peak, preemptions, busy share, and the
// share of the busy time in compute-bound steps (past `cost`'s ridge).
void add_run_traits(WorkloadTraits& traits, const RunResult& run, const RunSummary& summary, const CostModel& cost);
// The configurations the decision guide points to for these traits, `base` first.
std::vector<Candidate> guide_candidates(const WorkloadTraits& traits, const SloTargets& slo, const EngineConfig& base);
// The guide's branches that the simulated table cannot rank, for these traits.
std::vector<std::string> guide_considerations(const WorkloadTraits& traits);
// Runs `base`, reads the traits, runs every candidate and picks one.
Advice advise(const Workload& workload, const CostProfile& profile, const SloTargets& slo, const EngineConfig& base);

// The comparison table and the verdict, as Markdown.
std::string advice_markdown(const Advice& advice);
// The recommended configuration as TOML: the [engine] settings that differ from the defaults
// and the [optimizers.NAME] tables.
std::string recommended_toml(const Advice& advice);

}  // namespace optimate::bench
