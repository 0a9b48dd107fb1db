// Causal attention of prefill chunks over the paged KV cache, on tensor cores.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/kv_block.h"

namespace optimate::cuda {

// Query rows are grouped in tiles of up to kPrefillTileRows consecutive tokens of one
// sequence with consecutive positions. A tile is four int32:
//   {first token row, number of query rows, position of the first row, block-table row}.
// Query row i (position pos0 + i) attends to keys at positions [0, pos0 + i], which must
// already be in the cache (this step's keys included).
inline constexpr int kPrefillTileRows = 128;

struct PrefillAttentionParams {
  const __nv_bfloat16* q = nullptr;  // token row t's heads at q + t * q_row_stride
  int64_t q_row_stride = 0;
  KvArena cache;  // one layer's K and V blocks (kv_block.h); read only
  const int32_t* tiles = nullptr;  // [num_tiles, 4]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq] entries
  int64_t max_blocks_per_seq = 0;
  __nv_bfloat16* out = nullptr;  // token row t's heads at out + t * out_row_stride
  int64_t out_row_stride = 0;
  int64_t num_tiles = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // 64 or 128
  int64_t block_size = 0;
  float scale = 1.0f;
};

void prefill_attention(const PrefillAttentionParams& p, cudaStream_t stream);

}  // namespace optimate::cuda
