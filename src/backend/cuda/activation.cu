// silu(gate) * up over the fused gate/up projection, in fp32, rounded once to bf16.
// Layouts: gate_up [num_tokens, 2 * intermediate] bf16, out [num_tokens, intermediate] bf16.
// Launch: grid-stride over groups of 8 output elements (16-byte accesses) when intermediate
// is a multiple of 8, else over single elements.
#include "backend/cuda/activation.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"

namespace optimate::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float silu(float x) { return x / (1.0f + __expf(-x)); }

__global__ void silu_mul_vec8_kernel(const __nv_bfloat16* __restrict__ gate_up,
                                     __nv_bfloat16* __restrict__ out, int64_t num_groups,
                                     int64_t intermediate) {
  const int64_t groups_per_row = intermediate / 8;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; g < num_groups;
       g += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = g / groups_per_row;
    const int64_t c = (g % groups_per_row) * 8;
    float gate[8], up[8], y[8];
    load_bf16x8(gate_up + t * 2 * intermediate + c, gate);
    load_bf16x8(gate_up + t * 2 * intermediate + intermediate + c, up);
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = silu(gate[i]) * up[i];
    store_bf16x8(out + t * intermediate + c, y);
  }
}

__global__ void silu_mul_scalar_kernel(const __nv_bfloat16* __restrict__ gate_up,
                                       __nv_bfloat16* __restrict__ out, int64_t num_elems,
                                       int64_t intermediate) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < num_elems;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = i / intermediate;
    const int64_t c = i % intermediate;
    const float gate = __bfloat162float(gate_up[t * 2 * intermediate + c]);
    const float up = __bfloat162float(gate_up[t * 2 * intermediate + intermediate + c]);
    out[i] = __float2bfloat16(silu(gate) * up);
  }
}

int grid_for(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65536 ? blocks : 65536);
}

}  // namespace

void silu_mul(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int64_t num_tokens,
              int64_t intermediate, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(num_tokens >= 0 && intermediate > 0, "tokens {} intermediate {}",
                       num_tokens, intermediate);
  if (num_tokens == 0) return;
  if (intermediate % 8 == 0) {
    const int64_t groups = num_tokens * intermediate / 8;
    silu_mul_vec8_kernel<<<grid_for(groups), kThreads, 0, stream>>>(gate_up, out, groups,
                                                                    intermediate);
    OPTIMATE_CUDA_CHECK_LAUNCH("silu_mul_vec8_kernel");
  } else {
    const int64_t n = num_tokens * intermediate;
    silu_mul_scalar_kernel<<<grid_for(n), kThreads, 0, stream>>>(gate_up, out, n, intermediate);
    OPTIMATE_CUDA_CHECK_LAUNCH("silu_mul_scalar_kernel");
  }
}

}  // namespace optimate::cuda
