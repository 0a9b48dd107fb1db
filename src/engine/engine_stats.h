// A snapshot of the engine's state and running totals, for /metrics, queue limits and load
// reports. Taken on the engine's thread between steps; plain data, safe to hand to any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace optimate {

class Engine;

struct EngineStats {
  int64_t num_running = 0;  // sequences in the running set
  int64_t num_waiting = 0;  // sequences queued (new or preempted)
  std::map<int64_t, int64_t> num_waiting_by_priority;  // client's priority -> sequences
  int64_t kv_used_blocks = 0;  // blocks held by a sequence
  int64_t kv_total_blocks = 0;
  std::map<std::string, int64_t> kv_blocks_by_precision;  // used blocks by precision tag
  // Totals since the engine started; per-step figures are differences of two snapshots.
  int64_t num_steps = 0;
  int64_t num_preemptions = 0;
  int64_t num_prompt_tokens = 0;  // prefill tokens computed (prefix-cache hits excluded)
  int64_t num_generation_tokens = 0;
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_cache_hits = 0;     // of those, tokens found
};

EngineStats engine_stats(const Engine& engine);

}  // namespace optimate
