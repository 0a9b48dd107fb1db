// Rotary embedding applied in place to q and k inside the fused QKV GEMM output, so no
// separate q/k tensors are materialised. Pair (i, i + head_dim/2) of each head rotates by
// angle position * inv_freq[i], computed in fp32 like the reference (positions reach 1e5, so
// the accurate sincosf is used, not the fast intrinsic).
//
// Layout: qkv [num_tokens, row_stride] bf16: q heads then k heads (then v, untouched).
// Launch: one block per token; threads stride over (head, pair).
#include "backend/cuda/rope.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/rope_pair.cuh"

namespace optimate::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void rope_kernel(__nv_bfloat16* __restrict__ qkv, int64_t row_stride,
                            const int32_t* __restrict__ positions,
                            const float* __restrict__ inv_freq, int num_rot_heads,
                            int head_dim) {
  const int t = blockIdx.x;
  const int half = head_dim / 2;
  const float pos = static_cast<float>(positions[t]);
  __nv_bfloat16* row = qkv + t * row_stride;
  for (int idx = threadIdx.x; idx < num_rot_heads * half; idx += kThreads) {
    const int head = idx / half;
    const int i = idx % half;
    float s, c;
    sincosf(pos * inv_freq[i], &s, &c);
    __nv_bfloat16* h = row + head * head_dim;
    const float x0 = __bfloat162float(h[i]);
    const float x1 = __bfloat162float(h[i + half]);
    const float2 y = rope_pair(x0, x1, c, s);
    h[i] = __float2bfloat16(y.x);
    h[i + half] = __float2bfloat16(y.y);
  }
}

}  // namespace

void rope_inplace(__nv_bfloat16* qkv, int64_t row_stride, const int32_t* positions,
                  const float* inv_freq, int64_t num_tokens, int64_t num_heads,
                  int64_t num_kv_heads, int64_t head_dim, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(head_dim > 0 && head_dim % 2 == 0, "head_dim {}", head_dim);
  OPTIMATE_SHAPE_CHECK(row_stride >= (num_heads + num_kv_heads) * head_dim,
                       "row_stride {} < (heads {} + kv heads {}) * head_dim {}", row_stride,
                       num_heads, num_kv_heads, head_dim);
  if (num_tokens == 0) return;
  rope_kernel<<<num_tokens, kThreads, 0, stream>>>(qkv, row_stride, positions, inv_freq,
                                                   static_cast<int>(num_heads + num_kv_heads),
                                                   static_cast<int>(head_dim));
  OPTIMATE_CUDA_CHECK_LAUNCH("rope_kernel");
}

}  // namespace optimate::cuda
