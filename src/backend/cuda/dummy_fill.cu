// Seeded dummy weights generated in place on the GPU (an 8B model in well under a second,
// no host memory). Each element is a pure function of (seed, tensor id, index), so the host
// twin in cuda_weights.cpp reproduces it exactly.
// Layout: dst [n] bf16. Launch: grid-stride, 256 threads, at most 8192 blocks.
#include "backend/cuda/dummy_fill.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dummy_value.h"

namespace optimate::cuda {
namespace {

__global__ void dummy_fill_kernel(__nv_bfloat16* dst, int64_t n, uint64_t seed, uint32_t id,
                                  float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16(dummy_value(seed, id, static_cast<uint64_t>(i), lo, hi));
}

}  // namespace

void dummy_fill(__nv_bfloat16* dst, int64_t n, uint64_t seed, uint32_t tensor_id, float lo,
                float hi) {
  OPTIMATE_SHAPE_CHECK(n >= 0 && dst != nullptr, "n {}", n);
  if (n == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 8192));
  dummy_fill_kernel<<<blocks, 256>>>(dst, n, seed, tensor_id, lo, hi);
  OPTIMATE_CUDA_CHECK_LAUNCH("dummy_fill_kernel");
}

}  // namespace optimate::cuda
