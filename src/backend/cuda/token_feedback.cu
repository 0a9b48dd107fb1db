#include "backend/cuda/token_feedback.h"

#include "backend/cuda/cuda_check.h"

namespace optimate::cuda {
namespace {

__global__ void take_fed_back_kernel(int32_t* token_ids, int64_t n, const int32_t* drawn) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int32_t t = token_ids[i];
    if (t < 0) token_ids[i] = drawn[-1 - static_cast<int64_t>(t)];
  }
}

}  // namespace

void take_fed_back_tokens(int32_t* token_ids, int64_t n, const int32_t* drawn, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 32));
  take_fed_back_kernel<<<blocks, kThreads, 0, stream>>>(token_ids, n, drawn);
  OPTIMATE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace optimate::cuda
