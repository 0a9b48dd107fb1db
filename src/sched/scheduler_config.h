// The scheduler's limits, resolved from EngineConfig and the model.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/host_tier.h"
#include "kv/kv_layout.h"
#include "optim/preempt_mode_policy.h"

namespace optimate::sched {

struct SchedulerConfig {
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 2048;
  int64_t block_size = 16;
  int64_t num_kv_blocks = 0;  // slots of the runner's arenas (one per block in a static cache)
  bool enable_prefix_caching = true;
  // The runner's cache: its precisions and page size (kv/kv_layout.h).
  kv::KvLayout kv_layout = kv::KvLayout::of(kv::KvPrecision::kF32);
  // Whether the pool reuses freed space or untouched space first (kv/block_pool.h): the runner's.
  kv::FreeSpaceOrder kv_free_order = kv::FreeSpaceOrder::kUntouchedFirst;
  std::vector<int64_t> eos_token_ids;
  // The host tier (kv/host_tier.h): the swap region and the host prefix cache, in slots of the
  // runner's host arenas; and what a preempted request does with its blocks.
  kv::HostTierSlots host_slots;
  int64_t kv_bytes_per_slot = 0;       // one slot of every layer's K and V: what a copy moves
  double host_link_bytes_per_s = 0.0;  // the runner's, measured (0: unknown)
  PreemptionMode preemption_mode = PreemptionMode::kAuto;
  // Share of the pool a new request may not take the last of while others run (vLLM's block
  // manager watermark): room the running sequences grow into, so that a full pool does not
  // admit a prompt only to preempt a running sequence a few steps later.
  double kv_watermark = 0.01;

  // Throws Error(kInvalidArgument) naming the flag; also checks that one sequence of
  // max_model_len tokens fits in the KV pool, so a lone request can always run.
  void validate() const;
};

}  // namespace optimate::sched
