// Headline metrics of one run, named as `vllm bench serve` names them.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "bench/run_result.h"
#include "bench/stats.h"

namespace optimate::bench {

struct ClassSummary {
  std::string name;
  int64_t priority = 0;
  int64_t completed = 0;
  int64_t failed = 0;
  SampleStats ttft_ms;
  SampleStats e2el_ms;
  SampleStats queue_ms;  // empty when the target does not report scheduling times
};

struct RunSummary {
  std::string label;
  std::string description;
  std::string target;
  int64_t completed = 0;  // vllm: "Successful requests"
  int64_t failed = 0;
  double duration_s = 0.0;  // from the first send to the last finish
  int64_t total_input_tokens = 0;
  int64_t total_output_tokens = 0;
  double request_throughput = 0.0;      // req/s
  double output_throughput = 0.0;       // output tok/s
  double total_token_throughput = 0.0;  // (input + output) tok/s
  SampleStats ttft_ms;   // first token - send
  SampleStats tpot_ms;   // (e2e - ttft) / (output_tokens - 1), requests with > 1 token
  SampleStats itl_ms;    // every gap between consecutive tokens (chunks), all requests pooled
  SampleStats e2el_ms;   // finish - send
  SampleStats queue_ms;  // first scheduled - send
  int64_t num_preemptions = 0;
  // Multi-turn workloads: TTFT of the turns after a conversation's first (count 0 otherwise).
  SampleStats returning_ttft_ms;
  EngineTotals engine;  // in-process targets
  // Prefix-cache hit rates per tier (hits / queries, in tokens; NaN without queries).
  double prefix_hit_rate = 0.0;
  double host_prefix_hit_rate = 0.0;
  std::vector<ClassSummary> classes;  // most important first
  // Engine side, from step samples (absent over HTTP).
  int64_t num_steps = 0;
  SampleStats batch_size;
  std::map<int64_t, int64_t> batch_size_histogram;  // sequences per step -> steps
  double busy_fraction = 0.0;  // share of the run spent inside steps (a utilization proxy)
  double mean_kv_usage = 0.0;
  double max_kv_usage = 0.0;
  // GPU counters sampled during the run (NVML); count 0 when not sampled, and why.
  std::string gpu_device;
  std::string gpu_unavailable;
  SampleStats gpu_util_pct;
  SampleStats gpu_memory_used_gib;
  double gpu_memory_total_gib = 0.0;
  // The seed's resource columns, NaN where the target cannot tell: the GPU's mean utilization
  // (NVML, else the engine's device busy share: `gpu_util_source`) and the most memory it used
  // (NVML, else the engine's own allocations); the CPU's utilization (process CPU time over the
  // run's CPUs and wall time) and the peak resident memory.
  double gpu_util_mean_pct = std::numeric_limits<double>::quiet_NaN();
  std::string gpu_util_source;  // "NVML" or "engine busy time"
  double gpu_memory_peak_gib = std::numeric_limits<double>::quiet_NaN();
  double cpu_util_pct = std::numeric_limits<double>::quiet_NaN();
  double cpu_seconds = std::numeric_limits<double>::quiet_NaN();
  int64_t num_cpus = 0;
  double peak_rss_gib = std::numeric_limits<double>::quiet_NaN();
  std::string host_unavailable;
  // Cost: dollars per million output tokens at --price-per-hour (NaN without a price).
  double price_per_hour = 0.0;
  double usd_per_million_output_tokens = std::numeric_limits<double>::quiet_NaN();
};

RunSummary summarize(const RunResult& run);

}  // namespace optimate::bench
