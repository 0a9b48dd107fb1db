// The per-step metadata the kernels read (token ids, positions, KV slots, attention work
// lists, logits rows), packed on the host into int32 arrays at fixed offsets of one buffer.
// Fixed offsets keep device addresses stable, so a captured decode graph can be replayed
// after each new step's metadata is copied in.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "runner/model_runner.h"
#include "kv/kv_layout.h"

namespace optimate::cuda {

struct StepLimits {
  int64_t max_num_tokens = 0;
  int64_t max_num_seqs = 0;
  int64_t max_blocks_per_seq = 0;
  int64_t block_size = 16;
  int64_t num_kv_slots = 0;   // slots per arena
  // Slots a block of each entry precision code spans (kv_block_slots); 0: the cache cannot
  // hold that precision, and an entry naming it is refused.
  std::array<int64_t, 4> kv_block_slots{};
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;
  bool tensor_core_prefill = true;  // prefill chunks go to tiles; else to single-query rows
};

struct StepLayout {
  // Offsets (in int32 elements) of each array in the packed buffer.
  int64_t token_ids = 0;     // [max_num_tokens]
  int64_t positions = 0;     // [max_num_tokens]
  int64_t slot_mapping = 0;  // [max_num_tokens] write targets (kv_block.h), -1 = do not write (padding)
  int64_t rows = 0;          // [max_num_tokens] token row of each single-query attention row
  int64_t row_seq = 0;       // [max_num_tokens] its block-table row
  int64_t row_ctx = 0;       // [max_num_tokens] its number of keys
  int64_t block_tables = 0;  // [max_num_seqs, max_blocks_per_seq] entries (code << 28 | slot)
  int64_t tiles = 0;         // [max_tiles, 4] prefill tiles
  int64_t logits_rows = 0;   // [max_num_tokens] token rows whose logits are wanted, in order
  int64_t max_tiles = 0;
  int64_t total = 0;
  explicit StepLayout(const StepLimits& limits);
  StepLayout() = default;
};

struct StepInputs {
  int64_t num_tokens = 0;  // including padding rows
  int64_t num_seqs = 0;    // real slices
  int64_t num_rows = 0;    // single-query attention rows
  int64_t num_tiles = 0;
  int64_t num_logits_rows = 0;  // one per slice with want_logits, or its every token (all_logits)
  int64_t max_ctx = 0;
  int64_t num_fed_back = 0;  // tokens token_from_last_launch(k): the device fills them in
  // (offset, count) of the parts of the buffer this step filled, for the host-to-device copy.
  std::vector<std::pair<int64_t, int64_t>> used;
};

// Slots per block of each precision code in `layout` (0 where it holds none): a block must fit
// in them, which KvLayout::holds alone does not promise for a full-precision block of a static
// quantized cache.
std::array<int64_t, 4> kv_block_slots(const kv::KvLayout& layout, int64_t num_kv_heads, int64_t block_size,
                                      int64_t head_dim);

// True when every slice is one token that wants logits: the shape decode graphs replay.
bool is_uniform_decode(const ForwardBatch& batch);

// Validates the batch (token ids, positions, block-table entries against the limits and the
// KV layout; Error kInvalidArgument naming the slice) and packs it into `buffer` (layout.total
// int32).
// pad_to > num_seqs pads a uniform decode batch with rows that write no KV and attend to
// nothing, up to a captured graph's batch size. A token token_from_last_launch(k) with k below
// `fed_back_rows` (the rows the last launch draws) is packed as is, for the device to fill in;
// any other negative id is refused.
StepInputs pack_step(const ForwardBatch& batch, const StepLimits& limits, const StepLayout& layout,
                     int32_t* buffer, int64_t pad_to = 0, int64_t fed_back_rows = 0);

}  // namespace optimate::cuda
