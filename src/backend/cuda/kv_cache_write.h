// Writes each token's key and value heads into the paged KV cache, quantizing them when the
// token's block is fp8, int8 or int4 (kv_block.h).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/kv_block.h"

namespace optimate::cuda {

// k_src / v_src: token t's heads at k_src + t * src_row_stride, [num_kv_heads, head_dim] bf16.
// slot_mapping: [num_tokens] int32 write targets (kv_block.h: code << 28 | slot * block_size +
// token in block); negative = skip (padding rows of a captured decode graph).
void kv_cache_write(const __nv_bfloat16* k_src, const __nv_bfloat16* v_src, int64_t src_row_stride,
                    const KvArena& cache, const int32_t* slot_mapping, int64_t num_tokens,
                    int64_t num_kv_heads, int64_t block_size, int64_t head_dim, cudaStream_t stream);

}  // namespace optimate::cuda
