// Per-head RMSNorm of q and k (qk_norm.h): a warp per head, each lane 2 to 8 consecutive
// elements (head_dim 64 to 256), blocks of 8 heads of one token. Grid: (tokens, heads / 8).
#include "backend/cuda/qk_norm.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"

namespace optimate::cuda {
namespace {

constexpr int kWarps = 8;

template <int D>
__global__ void __launch_bounds__(kWarps * 32)
    qk_norm_kernel(__nv_bfloat16* __restrict__ qkv, int64_t row_stride, const __nv_bfloat16* __restrict__ q_weight,
                   const __nv_bfloat16* __restrict__ k_weight, int num_heads, int num_kv_heads, float eps) {
  constexpr int kPerLane = D / 32;
  const int head = blockIdx.y * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (head >= num_heads + num_kv_heads) return;
  __nv_bfloat16* x = qkv + blockIdx.x * row_stride + static_cast<int64_t>(head) * D + lane * kPerLane;
  const __nv_bfloat16* w = (head < num_heads ? q_weight : k_weight) + lane * kPerLane;
  float v[kPerLane];
  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    v[i] = __bfloat162float(x[i]);
    sum_sq += v[i] * v[i];
  }
  sum_sq = group_sum(sum_sq);
  const float inv_rms = rsqrtf(sum_sq / static_cast<float>(D) + eps);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const float y = __bfloat162float(__float2bfloat16(v[i] * inv_rms));
    x[i] = __float2bfloat16(__bfloat162float(w[i]) * y);
  }
}

}  // namespace

void qk_norm(__nv_bfloat16* qkv, int64_t row_stride, const __nv_bfloat16* q_weight, const __nv_bfloat16* k_weight,
             int64_t num_tokens, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, float eps,
             cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(head_dim == 64 || head_dim == 128 || head_dim == 256, "head_dim {}", head_dim);
  OPTIMATE_SHAPE_CHECK((num_heads + num_kv_heads) * head_dim <= row_stride, "{} + {} heads of {} in rows of {}",
                       num_heads, num_kv_heads, head_dim, row_stride);
  if (num_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(num_tokens),
                  static_cast<unsigned>((num_heads + num_kv_heads + kWarps - 1) / kWarps));
  const int h = static_cast<int>(num_heads), kvh = static_cast<int>(num_kv_heads);
  if (head_dim == 64) qk_norm_kernel<64><<<grid, kWarps * 32, 0, stream>>>(qkv, row_stride, q_weight, k_weight, h, kvh, eps);
  else if (head_dim == 128) qk_norm_kernel<128><<<grid, kWarps * 32, 0, stream>>>(qkv, row_stride, q_weight, k_weight, h, kvh, eps);
  else qk_norm_kernel<256><<<grid, kWarps * 32, 0, stream>>>(qkv, row_stride, q_weight, k_weight, h, kvh, eps);
  OPTIMATE_CUDA_CHECK_LAUNCH("qk_norm_kernel");
}

}  // namespace optimate::cuda
