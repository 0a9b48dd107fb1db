// Rounding an all-reduced fp32 projection to bf16, into the residual stream or a bf16 buffer.
// Layouts: flat [count] arrays. Launch: grid-stride over elements, 256 threads a block.
#include "backend/cuda/tp_residual.h"

#include "backend/cuda/cuda_check.h"

namespace optimate::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void add_rounded_kernel(const float* __restrict__ sum, float* __restrict__ residual, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * kThreads)
    residual[i] += __bfloat162float(__float2bfloat16(sum[i]));
}

__global__ void round_kernel(const float* __restrict__ in, __nv_bfloat16* __restrict__ out, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * kThreads)
    out[i] = __float2bfloat16(in[i]);
}

unsigned grid_for(int64_t count) {
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 4096 ? blocks : 4096);
}

}  // namespace

void add_rounded_to_residual(const float* sum, float* residual, int64_t count, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(count >= 0, "count {}", count);
  if (count == 0) return;
  add_rounded_kernel<<<grid_for(count), kThreads, 0, stream>>>(sum, residual, count);
  OPTIMATE_CUDA_CHECK(cudaGetLastError());
}

void round_to_bf16(const float* in, __nv_bfloat16* out, int64_t count, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(count >= 0, "count {}", count);
  if (count == 0) return;
  round_kernel<<<grid_for(count), kThreads, 0, stream>>>(in, out, count);
  OPTIMATE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace optimate::cuda
