// RMSNorm with the residual add fused in: one read of the branch output, one read-modify-write
// of the fp32 residual stream, one write of the normalised bf16 row that feeds the next GEMM.
//
// Layouts: x [rows, hidden] bf16, residual [rows, hidden] fp32, weight [hidden] bf16,
// out [num_rows, hidden] bf16. The residual stays fp32 so 32 layers of adds do not round.
// Launch: one block of 256 threads per output row; the row is walked twice (sum of squares,
// then scale), the second pass hitting L1/L2.
#include "backend/cuda/rmsnorm.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/programmatic_launch.h"

namespace optimate::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void rmsnorm_residual_kernel(const __nv_bfloat16* __restrict__ x,
                                        float* __restrict__ residual,
                                        const __nv_bfloat16* __restrict__ weight,
                                        __nv_bfloat16* __restrict__ out,
                                        const int32_t* __restrict__ row_ids, int hidden,
                                        float eps) {
  wait_for_prior_grid();
  allow_next_grid();
  const int r = blockIdx.x;
  const int64_t src = row_ids ? row_ids[r] : r;
  float* res = residual + src * hidden;
  const __nv_bfloat16* xr = x ? x + src * hidden : nullptr;

  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < hidden; i += kThreads) {
    float v = res[i];
    if (xr) {
      v += __bfloat162float(xr[i]);
      res[i] = v;
    }
    sum_sq += v * v;
  }
  __shared__ float warp_sums[kThreads / 32];
  sum_sq = group_sum(sum_sq);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum_sq;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
  const float inv_rms = rsqrtf(total / hidden + eps);

  __nv_bfloat16* o = out + static_cast<int64_t>(r) * hidden;
  for (int i = threadIdx.x; i < hidden; i += kThreads)
    o[i] = __float2bfloat16(res[i] * inv_rms * __bfloat162float(weight[i]));
}

}  // namespace

void rmsnorm_residual(const __nv_bfloat16* x, float* residual, const __nv_bfloat16* weight,
                      __nv_bfloat16* out, const int32_t* row_ids, int64_t num_rows,
                      int64_t hidden, float eps, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(num_rows >= 0 && hidden > 0 && hidden <= (1 << 20), "rows {} hidden {}",
                       num_rows, hidden);
  OPTIMATE_SHAPE_CHECK(residual && weight && out, "null pointer");
  if (num_rows == 0) return;
  launch_programmatic(rmsnorm_residual_kernel, dim3(static_cast<unsigned>(num_rows)),
                      dim3(kThreads), 0, stream, "rmsnorm_residual_kernel", x, residual, weight,
                      out, row_ids, static_cast<int>(hidden), eps);
}

}  // namespace optimate::cuda
