// The scheduler's state as observers outside the step see it (the engine's stats, /metrics,
// benchmarks): plain data, taken between steps.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace optimate::sched {

struct SchedulerSnapshot {
  int64_t num_running = 0;  // sequences in the running set
  int64_t num_waiting = 0;  // sequences queued (new or preempted)
  std::map<int64_t, int64_t> num_waiting_by_priority;  // engine priority -> sequences
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
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_cache_hits = 0;     // of those, tokens found
};

}  // namespace optimate::sched
