// What policies see: read-only snapshots of the scheduler's queues, the KV pool and the
// engine's metrics, built fresh for each decision. Policies never hold on to them.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/priority_order.h"
#include "core/request_metadata.h"
#include "kv/kv_precision.h"

namespace optimate::optim {

struct RequestView {
  int64_t seq_id = 0;          // the scheduler's id of this sequence (unique, never reused)
  std::string_view request_id;
  int64_t seq_index = 0;       // which of the request's n samples
  RequestMetadata metadata;    // as the front end sent it: the priority, and what else it says
  int64_t arrival_ns = 0;
  int64_t num_prompt_tokens = 0;
  int64_t num_output_tokens = 0;
  int64_t num_computed_tokens = 0;
  int64_t max_tokens = 0;
  int64_t num_blocks = 0;      // KV blocks held now
  int64_t num_full_blocks = 0; // of those, at full precision (requantizable when full of tokens)
  int64_t num_preemptions = 0;
  // Bytes of KV its computed tokens hold (every layer's K and V, at their precisions): what
  // swapping it out would copy.
  int64_t num_kv_bytes = 0;
  int64_t admitted_ns = -1;    // when it last entered the running set (-1: never)
  bool scheduled_this_step = false;
};

struct KvView {
  int64_t num_blocks = 0;       // blocks of the default precision the empty cache holds
  int64_t num_free_blocks = 0;  // of the default precision, allocatable now
  int64_t block_size = 0;
  kv::KvPrecision default_precision = kv::KvPrecision::kF32;
  double used = 0.0;            // share of the cache's bytes held by sequences (0..1)
  double usage() const { return used; }
  // The host tier's swap region: blocks of the default precision it holds (0: no swap space)
  // and could take now, and the runner's host-link bandwidth (0: unknown).
  int64_t num_host_blocks = 0;
  int64_t num_host_free_blocks = 0;
  double host_link_bytes_per_s = 0.0;
  // Prefix caching on: a victim that recomputes leaves its full blocks in the pool as cached
  // blocks, which its resumption finds again unless they were evicted meanwhile.
  bool prefix_caching = false;
  // The finest precision blocks can be requantized to (a cache laid out for kv_quant); nullopt:
  // a cache of one precision, where no block changes precision.
  std::optional<kv::KvPrecision> finest_precision;
  // Blocks in use per precision code (kv/kv_format.h: 0 full precision, 1 fp8, 2 int8, 3 int4).
  std::array<int64_t, 4> used_blocks_by_code{};
  // What admitting a request takes: the blocks for its whole uncomputed prompt (true: the
  // engine's scheduler, vLLM's with scheduler_reserve_full_isl) or for its first chunk, and
  // watermark_blocks more left free while others run (the engine's admission watermark).
  bool admits_whole_prompt = false;
  int64_t watermark_blocks = 0;
};

// How much of the KV pool each priority class may take. A controller sets it between steps;
// the queue and preemption policies enforce it (optim/kv_quota.h), the scheduler only carries
// it. The defaults limit nothing.
struct KvQuota {
  // Free blocks kept for requests of priority >= reserve_min_priority: a less important request
  // is not admitted when its first chunk would leave fewer free blocks than this.
  int64_t reserve_blocks = 0;
  EnginePriority reserve_min_priority;
  // A long generation (max_tokens >= long_min_tokens) is not admitted while the long
  // generations of its priority class hold long_max_share of the pool or more; when the pool
  // runs dry, a long generation of such a class is the victim first.
  double long_max_share = 1.0;
  int64_t long_min_tokens = 0;
  // The most blocks in use (each counted once, whatever its precision) once a request below
  // footprint_min_priority is admitted with all its tokens (0: no limit); a held request is not
  // overtaken by one of its priority or below. A KV policy that frees room by quantizing sets
  // it (KvPolicy::admission_footprint), so that the room serves the important class rather than
  // a bigger batch of the others.
  int64_t footprint_blocks = 0;
  EnginePriority footprint_min_priority;

  bool active() const { return reserve_blocks > 0 || long_max_share < 1.0 || footprint_blocks > 0; }
  bool operator==(const KvQuota&) const = default;
};

// Settings a controller moves between steps and policies read from their view. Each is one
// field here, read by the policy of its slot; a field at its default leaves every policy on
// its own options.
struct PolicyKnobs {
  KvQuota kv_quota;
  // The longest a batch policy may hold new requests back, in ms (0: never hold); nullopt:
  // the policy's own max_wait_ms.
  std::optional<double> batch_max_wait_ms;
  // The precision the KV policy stores eligible requests' blocks at, whatever the cache's
  // usage (a controller strengthening KV quantization under memory pressure); never finer
  // than the cache holds. nullopt: the policy's own precision and thresholds.
  std::optional<kv::KvPrecision> kv_quant_precision;

  bool operator==(const PolicyKnobs&) const = default;
};

struct SchedulerView {
  int64_t now_ns = 0;
  std::span<const RequestView> waiting;  // in the mechanism's order (preempted first, then arrival)
  std::span<const RequestView> running;  // in admission order
  KvView kv;
  int64_t max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t token_budget_left = 0;
  // Time of the last step that ran, from schedule() to update() (forward pass and sampling);
  // 0 before the first.
  int64_t last_step_ns = 0;
  // Measured time per token of steps that compute many tokens (prefill chunks): what
  // recomputing a token costs. 0 until such a step ran.
  double prefill_ns_per_token = 0.0;
  // Moving average of the steps' times (0 before the first).
  double mean_step_ns = 0.0;
  PolicyKnobs knobs;
};

// One priority class at the time of the view.
struct ClassMetrics {
  EnginePriority priority;
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  int64_t kv_blocks = 0;       // blocks its running sequences hold
  int64_t long_kv_blocks = 0;  // of those, held by long generations (KvQuota::long_min_tokens)
};

// Figures over the last window_ms of engine time (the controller's window). Percentiles are 0
// when their sample count is 0.
struct WindowMetrics {
  double window_ms = 0.0;
  int64_t num_arrivals = 0;
  double arrival_rate_per_s = 0.0;
  int64_t num_ttft_samples = 0;  // requests whose first token came out in the window
  double ttft_p50_ms = 0.0;
  double ttft_p99_ms = 0.0;
  // Sequences that finished in the window with two tokens or more: (last token - first token)
  // / (tokens - 1), vLLM's TPOT, so a target reads as the benchmark reports it.
  int64_t num_tpot_samples = 0;
  double tpot_p50_ms = 0.0;
  double tpot_p99_ms = 0.0;
  int64_t num_steps = 0;
  double step_ms_mean = 0.0;     // forward pass and sampling, no idling
  double step_ms_p99 = 0.0;
  double busy_fraction = 0.0;    // share of the window spent in steps
  double generated_tokens_per_s = 0.0;
  double prompt_tokens_per_s = 0.0;  // prefill computed (prefix-cache hits excluded)
};

// Engine-wide figures a Controller reads between steps.
struct MetricsView {
  int64_t now_ns = 0;
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  double kv_usage = 0.0;
  int64_t num_steps = 0;
  int64_t num_preemptions = 0;     // since start
  int64_t num_generated_tokens = 0;
  int64_t num_prompt_tokens = 0;   // computed (not cached) prompt tokens since start
  int64_t last_step_num_tokens = 0;
  // Filled by the engine: the KV pool's size, how long the oldest waiting request has waited
  // (a lower bound on its time to first token, ahead of any TTFT sample), the classes in
  // priority order (most important first) and the window.
  int64_t num_kv_blocks = 0;
  double oldest_waiting_ms = 0.0;
  std::vector<ClassMetrics> classes;
  WindowMetrics window;
};

}  // namespace optimate::optim
