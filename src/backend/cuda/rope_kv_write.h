// Rotary embedding and the paged KV-cache write in one pass over the fused QKV buffer.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/kv_block.h"

namespace optimate::cuda {

// Whether rope_kv_write takes this shape: head_dim 64 or 128, rows of 8-byte aligned heads.
bool rope_kv_write_fits(int64_t head_dim, int64_t row_stride);

// rope_inplace followed by kv_cache_write, in one launch: for each token t,
//   q heads and k heads of row t rotated in place (rope.h: rotate-half, fp32, rounded to bf16);
//   the rotated k and the v heads written to the cache at slot_mapping[t] in the precision of
//   that block (kv_cache_write.h; negative: nothing written, q and k still rotated).
// qkv: [num_tokens, row_stride] bf16, q heads [num_heads, head_dim] at column 0, then k heads
// and v heads [num_kv_heads, head_dim]; positions, slot_mapping: [num_tokens] int32;
// inv_freq: [head_dim / 2] fp32. The buffer and the cache end exactly as after the two
// separate kernels. Needs rope_kv_write_fits(head_dim, row_stride).
void rope_kv_write(__nv_bfloat16* qkv, int64_t row_stride, const int32_t* positions, const float* inv_freq,
                   const KvArena& cache, const int32_t* slot_mapping, int64_t num_tokens, int64_t num_heads,
                   int64_t num_kv_heads, int64_t block_size, int64_t head_dim, cudaStream_t stream);

}  // namespace optimate::cuda
