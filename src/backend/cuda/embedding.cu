// Embedding gather: copies one table row per token into the fp32 residual stream, which the
// first layer's fused RMSNorm then reads without an add. A rank of a vocabulary split holds
// rows [vocab_begin, vocab_begin + vocab_rows) and writes zeros for every other token, so the
// all-reduce that follows gives each token its row.
// Layouts: table [vocab_rows, hidden] bf16, token_ids [num_tokens] int32, residual
// [num_tokens, hidden] fp32. Launch: one block of 256 threads per token.
#include "backend/cuda/embedding.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/programmatic_launch.h"

namespace optimate::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void embedding_gather_kernel(const __nv_bfloat16* __restrict__ table,
                                        const int32_t* __restrict__ token_ids,
                                        float* __restrict__ residual, int hidden,
                                        int64_t vocab_begin, int64_t vocab_rows) {
  wait_for_prior_grid();
  allow_next_grid();
  const int t = blockIdx.x;
  const int64_t id = token_ids[t] - vocab_begin;
  float* dst = residual + static_cast<int64_t>(t) * hidden;
  if (id < 0 || id >= vocab_rows) {
    for (int i = threadIdx.x; i < hidden; i += kThreads) dst[i] = 0.0f;
    return;
  }
  const __nv_bfloat16* row = table + id * hidden;
  for (int i = threadIdx.x; i < hidden; i += kThreads) dst[i] = __bfloat162float(row[i]);
}

}  // namespace

void embedding_gather(const __nv_bfloat16* table, const int32_t* token_ids, float* residual,
                      int64_t num_tokens, int64_t hidden, int64_t vocab_begin, int64_t vocab_rows,
                      cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(hidden > 0 && num_tokens >= 0 && vocab_begin >= 0 && vocab_rows > 0,
                       "tokens {} hidden {} vocabulary rows [{}, +{})", num_tokens, hidden, vocab_begin, vocab_rows);
  if (num_tokens == 0) return;
  launch_programmatic(embedding_gather_kernel, dim3(static_cast<unsigned>(num_tokens)),
                      dim3(kThreads), 0, stream, "embedding_gather_kernel", table, token_ids,
                      residual, static_cast<int>(hidden), vocab_begin, vocab_rows);
}

}  // namespace optimate::cuda
