// The scheduler's state as observers outside the step see it (the engine's stats, /metrics,
// benchmarks): plain data, taken between steps.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/priority_order.h"

namespace optimate::sched {

struct SchedulerSnapshot {
  int64_t num_running = 0;  // sequences in the running set
  int64_t num_waiting = 0;  // sequences queued (new or preempted)
  std::map<EnginePriority, int64_t> num_waiting_by_priority;  // sequences per priority
  int64_t num_waiting_tokens = 0;  // the waiting sequences' tokens (prompt and generated)
  int64_t kv_total_blocks = 0;
  int64_t kv_used_blocks = 0;  // blocks held by a sequence
  double kv_usage = 0.0;       // share of the cache's bytes held (0..1)
  std::map<std::string, int64_t> kv_blocks_by_precision;  // used blocks by precision tag
  int64_t kv_requantized_blocks = 0;  // full blocks requantized in place since start
  std::map<std::string, int64_t> kv_requantized_by_precision;  // the same, by precision taken
  std::string kv_full_precision;      // the cache's own precision ("bf16", "f32")
  int64_t kv_capacity_tokens = 0;     // tokens the empty cache holds at its default precision
  // Every active policy's own counters (PolicyCounter), by optimizer name.
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, double>>>> optimizer_counters;
  // Totals since the scheduler started.
  int64_t num_steps = 0;
  int64_t num_preemptions = 0;
  int64_t num_prompt_tokens = 0;  // prefill tokens computed (prefix-cache hits excluded)
  int64_t num_generation_tokens = 0;
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up in the prefix cache (device tier)
  int64_t prefix_cache_hits = 0;     // of those, tokens found
  // Preemptions by mode ("recompute", "swap") and reason (sched/scheduler.h), and the time
  // preempted sequences took to get back to where they stopped.
  std::map<std::string, std::map<std::string, int64_t>> preemptions_by_mode;
  int64_t preempted_ns = 0;
  // The host tier (kv/host_tier.h): swap traffic and space, and the host prefix cache.
  int64_t num_swapped = 0;               // sequences swapped out now
  int64_t kv_swapped_out_blocks = 0;
  int64_t kv_swapped_in_blocks = 0;
  int64_t host_swap_total_blocks = 0;
  int64_t host_swap_used_blocks = 0;
  int64_t host_prefix_total_blocks = 0;
  int64_t host_prefix_cached_blocks = 0;
  int64_t host_prefix_cache_queries = 0;  // tokens looked up in the host tier (device misses)
  int64_t host_prefix_cache_hits = 0;     // of those, tokens restored from host memory
};

}  // namespace optimate::sched
