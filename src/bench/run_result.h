// What one benchmark run records: a record per request and a sample per engine step. Times
// are seconds from the start of the run (the first request is sent at 0).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "engine/step_profile.h"

namespace optimate::bench {

struct RequestRecord {
  std::string id;
  int64_t priority = 0;
  std::string priority_class;
  double arrival_s = 0.0;  // sent (closed loop: when a slot freed)
  // First admitted into a batch; NaN when the target cannot tell (an HTTP server).
  double scheduled_s = std::numeric_limits<double>::quiet_NaN();
  double first_token_s = std::numeric_limits<double>::quiet_NaN();
  // Arrival time of each output token, or of each streamed chunk over HTTP (a chunk may carry
  // several tokens; ITL is then measured per chunk, as vllm bench does).
  std::vector<double> token_times_s;
  double finish_s = std::numeric_limits<double>::quiet_NaN();
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  int64_t num_preemptions = 0;
  int64_t turn = 0;  // multi-turn workloads: 0 for a conversation's first turn
  bool success = false;
  std::string error;  // why it failed
};

// The engine's state after one step (in-process and simulated targets only).
struct StepSample {
  double t_s = 0.0;           // end of the step
  double duration_s = 0.0;    // model time of the step
  int64_t batch_size = 0;     // sequences in the step
  int64_t num_tokens = 0;     // tokens in the step (prefill chunks + decodes)
  int64_t num_waiting = 0;    // requests queued after the step
  int64_t num_running = 0;
  double kv_usage = 0.0;      // fraction of KV blocks in use, 0..1
};

// GPU counters sampled during a run (NVML, every ~100 ms), where a GPU can be read.
struct GpuSample {
  double t_s = 0.0;              // from the start of sampling
  double util_pct = 0.0;         // share of the last sample period a kernel ran, 0..100
  double memory_used_bytes = 0.0;
};

struct GpuUsage {
  std::string unavailable;  // why nothing was sampled ("" when sampled)
  std::string device;       // "NVIDIA H200 (NVML index 0)"
  double memory_total_bytes = 0.0;
  std::vector<GpuSample> samples;
  // The engine's own device allocations (weights and the KV cache it planned): the memory
  // figure where NVML cannot be read (a server's optimate:engine_memory_bytes); 0 if unknown.
  double engine_memory_bytes = 0.0;
  // The device's busy share of the run from the engine's own step timing (a server's
  // optimate:device_busy_seconds): the utilization figure where NVML cannot be read; NaN if unknown.
  double engine_busy_pct = std::numeric_limits<double>::quiet_NaN();
};

// CPU time and memory of the process that ran the model, over the run: the benchmark's own
// (in-process targets) or the server's (--url, from its /metrics).
struct HostUsage {
  std::string unavailable;   // why nothing was measured ("" when measured)
  double cpu_seconds = 0.0;  // user + system time during the run
  double wall_s = 0.0;       // the span it was measured over
  int64_t num_cpus = 0;      // CPUs the process may run on
  double peak_resident_bytes = 0.0;  // the resident set's high-water mark during the run
};

// What the engine did over the run (in-process and simulated targets): prefix-cache lookups
// per tier, in tokens, and preemptions by how the victims gave their KV back.
struct EngineTotals {
  int64_t prefix_queries_tokens = 0;       // the device tier
  int64_t prefix_hits_tokens = 0;
  int64_t host_prefix_queries_tokens = 0;  // the host tier (the device tier's misses)
  int64_t host_prefix_hits_tokens = 0;
  int64_t recompute_preemptions = 0;
  int64_t swap_preemptions = 0;
  int64_t swapped_out_blocks = 0;
  int64_t swapped_in_blocks = 0;
  double preempted_s = 0.0;  // preempted requests' time until back where they stopped, summed
};

struct RunResult {
  std::string label;        // configuration name: "baseline", "A", "max_wait_ms=50", ...
  std::string description;  // one line for the report: what the configuration turns on
  std::string target;       // "in-process cpu", "sim h200-llama3-8b", "http://host:port"
  std::vector<RequestRecord> records;
  std::vector<StepSample> steps;
  int64_t num_preemptions = 0;  // engine-wide count (in-process targets)
  EngineTotals engine;          // in-process targets
  GpuUsage gpu;
  HostUsage host;
  double price_per_hour = 0.0;  // what an hour of the target costs (--price-per-hour); 0: not given
  // The engine's account of where the run's time went: in-process, or from an Optimate
  // server's /metrics before and after the run; absent otherwise, and why.
  std::optional<StepProfile> step_profile;
  std::string step_profile_unavailable;
};

}  // namespace optimate::bench
