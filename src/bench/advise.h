// `optimate advise`: which optimizers fit a workload. It reads the traffic's traits (the
// questions of the seed's decision guide, section 5.3: interactive or batch, priorities
// present, how regular the arrivals are, whether memory runs short), picks the candidate
// configurations the guide points to, runs each on the simulated backend, and recommends the
// one that meets the SLO with the most throughput, with the comparison table that justifies it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/cost_model.h"
#include "bench/summary.h"
#include "bench/workload.h"
#include "config/engine_config.h"

namespace optimate::bench {

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
  double arrival_cv = 0.0;        // coefficient of variation of the gaps: 1 Poisson, > 1.5 bursty
  bool offline = false;           // every request at once
  std::vector<int64_t> priorities;  // distinct values, most important first
  double mean_prompt_tokens = 0.0;
  double mean_output_tokens = 0.0;
  // From the default configuration's run: the most KV it held, and its preemptions.
  double max_kv_usage = 0.0;
  int64_t default_preemptions = 0;

  bool interactive(const SloTargets& slo) const { return slo.any(); }
  bool regular() const { return !offline && arrival_cv <= 1.5; }
  bool memory_pressure() const { return max_kv_usage >= 0.9 || default_preemptions > 0; }
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
};

// The traits a workload shows before any run (max_kv_usage and default_preemptions are 0).
WorkloadTraits workload_traits(const Workload& workload);
// The configurations the decision guide points to for these traits, `base` first.
std::vector<Candidate> guide_candidates(const WorkloadTraits& traits, const SloTargets& slo, const EngineConfig& base);
// Runs `base`, reads the traits, runs every candidate and picks one.
Advice advise(const Workload& workload, const CostProfile& profile, const SloTargets& slo, const EngineConfig& base);

// The comparison table and the verdict, as Markdown.
std::string advice_markdown(const Advice& advice);
// The recommended configuration as TOML: the [engine] settings that differ from the defaults
// and the [optimizers.NAME] tables.
std::string recommended_toml(const Advice& advice);

}  // namespace optimate::bench
