// Row-wise argmax over the logits: one block per row, each thread scans a strided slice,
// then warp shuffles and one shared-memory pass pick (max value, lowest index).
// Layouts: logits [num_rows, vocab] fp32, token_ids [num_rows] int32.
// Launch: num_rows blocks of 512 threads.
#include "backend/cuda/argmax.h"

#include <cfloat>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/programmatic_launch.h"

namespace optimate::cuda {
namespace {

constexpr int kThreads = 512;

struct Best {
  float value;
  int index;
};

__device__ __forceinline__ Best better(Best a, Best b) {
  if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
  return a;
}

__global__ void argmax_kernel(const float* __restrict__ logits, int32_t* __restrict__ token_ids,
                              int vocab) {
  wait_for_prior_grid();
  allow_next_grid();
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  Best best{-FLT_MAX, vocab};
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = row[i];
    if (v > best.value || (v == best.value && i < best.index)) best = {v, i};
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    Best other{__shfl_xor_sync(0xffffffffu, best.value, offset),
               __shfl_xor_sync(0xffffffffu, best.index, offset)};
    best = better(best, other);
  }
  __shared__ Best warp_best[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    Best b = warp_best[0];
    for (int w = 1; w < kThreads / 32; ++w) b = better(b, warp_best[w]);
    // A row of NaN or -inf only still yields a valid token id.
    token_ids[blockIdx.x] = b.index < vocab ? b.index : 0;
  }
}

}  // namespace

void argmax_rows(const float* logits, int32_t* token_ids, int64_t num_rows, int64_t vocab,
                 cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(vocab > 0 && vocab < (int64_t{1} << 31), "vocab {}", vocab);
  if (num_rows == 0) return;
  launch_programmatic(argmax_kernel, dim3(static_cast<unsigned>(num_rows)), dim3(kThreads), 0,
                      stream, "argmax_kernel", logits, token_ids, static_cast<int>(vocab));
}

}  // namespace optimate::cuda
