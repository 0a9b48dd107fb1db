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

// The dynamic shared memory a launch takes: the Q tile and two K/V stages of `key_tile` keys
// (bf16 rows padded by 8 elements), or one stage and a raw stage of codes and scales for a
// cache that may hold quantized blocks.
constexpr int64_t prefill_attention_smem_bytes(int64_t head_dim, bool quantized, int64_t key_tile) {
  const int64_t ld = head_dim + 8;
  const int64_t stage = 2 * (2 * key_tile * ld);           // K and V tiles, bf16
  const int64_t raw = quantized ? 2 * key_tile * (2 * head_dim + 8) : 0;
  return 2 * kPrefillTileRows * ld + (quantized ? 1 : 2) * stage + raw;
}

// Keys each step of the kernel takes: 64, or 32 where a block's shared memory (`smem_bytes`,
// KernelPaths::variant_smem_bytes) cannot hold the stages of 64 (head_dim 128 on the 8.6 and
// 8.9 parts: 102 KB against their 99 KB); 0 where neither fits.
constexpr int prefill_attention_key_tile(int64_t head_dim, bool quantized, int64_t smem_bytes) {
  if (prefill_attention_smem_bytes(head_dim, quantized, 64) <= smem_bytes) return 64;
  if (prefill_attention_smem_bytes(head_dim, quantized, 32) <= smem_bytes) return 32;
  return 0;
}

}  // namespace optimate::cuda
