// Rotary position embedding (rotate-half / NeoX form, the Hugging Face Llama layout).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace optimate::cuda {

// Rotates, in place, the query heads and key heads of each token row of the fused QKV buffer.
// qkv: [num_tokens, row_stride] bf16 holding q heads [num_heads, head_dim] at column 0 and
// k heads [num_kv_heads, head_dim] right after; positions: [num_tokens] int32;
// inv_freq: [head_dim / 2] fp32 (scaling such as llama3's already applied).
void rope_inplace(__nv_bfloat16* qkv, int64_t row_stride, const int32_t* positions,
                  const float* inv_freq, int64_t num_tokens, int64_t num_heads,
                  int64_t num_kv_heads, int64_t head_dim, cudaStream_t stream);

}  // namespace optimate::cuda
