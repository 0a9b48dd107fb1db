// What crosses the boundary between the engine and a compute backend in one step: the KV
// cache's shape, the batch of sequence slices, how to sample each logits row, and what a runner
// measured. Plain data (runner/model_runner.h is the interface that takes it).
//
// KV layout (identical on every backend): per layer, a K arena and a V arena of
// num_blocks slots of layout.slot_bytes each (kv/kv_layout.h). A sequence's token at position
// p lives in the block of block-table entry block_table[p / block_size], at row p % block_size;
// the entry gives the block's first slot and its precision, and kv/kv_format.h the bytes of
// each precision. Entries come from kv/BlockPool; the runner owns the storage.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/sampling_params.h"
#include "kv/host_tier.h"
#include "kv/kv_copy.h"
#include "kv/kv_format.h"
#include "kv/kv_layout.h"

namespace optimate {

struct KvCacheShape {
  int64_t num_layers = 0;
  int64_t num_blocks = 0;  // slots per arena (a block takes layout.slots_for(precision) of them)
  int64_t block_size = 16;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  kv::KvLayout layout;     // slot size, the runner's full precision, what else it holds
  // The host tier in host memory with the same layout, as the runner was built with it: its
  // swap region, then its host prefix cache (kv/host_tier.h); none when both are 0. The engine
  // takes this plan as it is.
  kv::HostTierSlots host_tier;
  // Which space the block pool hands out first (kv/block_pool.h): freed blocks first when the
  // arenas' memory is mapped on first write, so resident memory follows the live blocks.
  kv::FreeSpaceOrder free_order = kv::FreeSpaceOrder::kUntouchedFirst;

  // Slots per host arena (kv/kv_copy.h).
  int64_t num_host_slots() const { return host_tier.swap + host_tier.prefix; }
};

// Turns a full-precision block into a quantized one in place: the block keeps its first slot,
// so only the entry's precision code changes (kv/kv_format.h).
using RequantizeOp = kv::RequantizeOp;

// What a runner allocated for one step. The scheduler's limits may move at run time up to
// these and never past them: a step beyond them would fail.
struct StepCapacity {
  int64_t max_num_seqs = std::numeric_limits<int64_t>::max();
  int64_t max_num_batched_tokens = std::numeric_limits<int64_t>::max();
  int64_t max_model_len = std::numeric_limits<int64_t>::max();  // positions per sequence
};

// One sequence's part of a step: a prefill chunk (many tokens) or a decode (one token).
struct SeqSlice {
  std::span<const int32_t> token_ids;   // tokens to run this step
  int64_t start_pos = 0;                // position of token_ids[0]
  std::span<const int32_t> block_table; // entries covering positions [0, start_pos + token_ids.size())
  bool want_logits = true;              // logits of the slice's last token
  // Logits of every token of the slice instead (prompt logprobs, perplexity): token_ids.size()
  // rows, in order; the last is the one sampled from. Implies want_logits.
  bool all_logits = false;
};

struct ForwardBatch {
  std::vector<SeqSlice> seqs;
};

// A token id that stands for the token drawn for row `row` of the previous launch_sample().
constexpr int32_t token_from_last_launch(int64_t row) { return static_cast<int32_t>(-1 - row); }
// The row a token_from_last_launch() id names, or -1 for an ordinary token id.
constexpr int64_t last_launch_row(int32_t token_id) { return token_id < 0 ? -1 - static_cast<int64_t>(token_id) : -1; }

// How to draw one logits row's token on the device (backend/cpu/sampler.h is the rule).
struct SampleSpec {
  const SamplingParams* params = nullptr;
  uint64_t seed = 0;
  int64_t output_index = 0;  // tokens the sequence generated before this one
};

// What a runner measured of the step it ran last (engine/step_profile.h).
struct StepDeviceTimes {
  double busy_s = 0.0;  // the device, from the step's first operation to its last
  // Seconds per stage of the forward pass, when the step was timed by stage; empty otherwise.
  std::vector<std::pair<std::string, double>> stages;
};

}  // namespace optimate
