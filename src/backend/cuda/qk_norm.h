// Qwen3's RMSNorm over each query and key head, in place in the fused QKV buffer, before rotary
// embedding (the CPU runner's twin: rms_norm per head, cpu_model_runner.cpp).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace optimate::cuda {

// For each token t and each of the num_heads q heads and num_kv_heads k heads of row t of qkv
// ([num_tokens, row_stride] bf16; q heads at column 0, k heads after them):
//   x = head (bf16 -> fp32); y = bf16(x * rsqrt(mean(x^2) + eps)); head = bf16(weight * y)
// as transformers' Qwen3RMSNorm computes in bf16 (weight [head_dim] bf16: q_weight for q heads,
// k_weight for k heads). Needs head_dim % 64 == 0 and at most 256.
void qk_norm(__nv_bfloat16* qkv, int64_t row_stride, const __nv_bfloat16* q_weight, const __nv_bfloat16* k_weight,
             int64_t num_tokens, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, float eps,
             cudaStream_t stream);

}  // namespace optimate::cuda
