// What policies see: read-only snapshots of the scheduler's queues, the KV pool and the
// engine's metrics, built fresh for each decision. Policies never hold on to them.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "kv/kv_precision.h"

namespace optimate::optim {

struct RequestView {
  int64_t seq_id = 0;          // the scheduler's id of this sequence (unique, never reused)
  std::string_view request_id;
  int64_t seq_index = 0;       // which of the request's n samples
  int64_t priority = 0;        // larger is more important
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
};

}  // namespace optimate::optim
