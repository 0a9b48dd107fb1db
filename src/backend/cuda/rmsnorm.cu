// RMSNorm with the residual add fused in: one read of the branch output, one read-modify-write
// of the fp32 residual stream, one write of the normalised row that feeds the next GEMM (bf16,
// or e4m3 codes and a row scale for an FP8 linear).
//
// Layouts: x [rows, hidden] bf16, residual [rows, hidden] fp32, weight [hidden] bf16,
// out [num_rows, hidden] bf16 (or codes [num_rows, hidden] e4m3 + scales [num_rows] fp32).
// The residual stays fp32 so 32 layers of adds do not round.
//
// rmsnorm_rows_kernel (kCurrent): one block per output row (row_kernel.cuh's shape: 4096
// elements take 512 threads of one 16-byte group each); a thread loads its residual (2 x 16
// bytes), branch (16 bytes) and weight (16 bytes) groups before any arithmetic and keeps them in
// registers through the block's sum of squares, so the row crosses memory once.
// rmsnorm_residual_kernel (kBaseline, and rows the row kernel does not take): one block of 256
// threads per row, 4-byte accesses, the row walked twice (sum of squares, then scale). The fused
// decode GEMV (gemv.cu) follows its reduction order.
#include "backend/cuda/rmsnorm.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/programmatic_launch.h"
#include "backend/cuda/row_kernel.cuh"

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

// out: bf16 [num_rows, hidden] (kFp8 false) or e4m3 codes [num_rows, hidden] with scales.
template <int kChunks, bool kFp8>
__global__ void __launch_bounds__(kRowMaxThreads)
    rmsnorm_rows_kernel(const __nv_bfloat16* __restrict__ x, float* __restrict__ residual,
                        const __nv_bfloat16* __restrict__ weight, void* __restrict__ out,
                        float* __restrict__ out_scales, const int32_t* __restrict__ row_ids, int hidden,
                        float eps) {
  __shared__ float scratch[32];
  wait_for_prior_grid();
  allow_next_grid();
  const int64_t r = blockIdx.x;
  const int64_t src = row_ids ? row_ids[r] : r;
  float* res = residual + src * hidden;
  const __nv_bfloat16* xr = x ? x + src * hidden : nullptr;
  const int groups = hidden / 8;

  float v[kChunks][8];
  uint4 xw[kChunks], ww[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int g = threadIdx.x + c * blockDim.x;
    if (g >= groups) {  // past a narrow row's end: zeros, never stored
      for (float& e : v[c]) e = 0.0f;
      xw[c] = ww[c] = make_uint4(0, 0, 0, 0);
      continue;
    }
    const float4 a = *reinterpret_cast<const float4*>(res + 8 * g);
    const float4 b = *reinterpret_cast<const float4*>(res + 8 * g + 4);
    v[c][0] = a.x, v[c][1] = a.y, v[c][2] = a.z, v[c][3] = a.w;
    v[c][4] = b.x, v[c][5] = b.y, v[c][6] = b.z, v[c][7] = b.w;
    if (xr) xw[c] = load_16_bytes(xr + 8 * g);
    ww[c] = load_16_bytes(weight + 8 * g);
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int g = threadIdx.x + c * blockDim.x;
    if (g >= groups) continue;
    if (xr) {
      float xv[8];
      unpack_bf16x8(*reinterpret_cast<const Bf16x8*>(&xw[c]), xv);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[c][i] += xv[i];
      *reinterpret_cast<float4*>(res + 8 * g) = make_float4(v[c][0], v[c][1], v[c][2], v[c][3]);
      *reinterpret_cast<float4*>(res + 8 * g + 4) = make_float4(v[c][4], v[c][5], v[c][6], v[c][7]);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) sum_sq += v[c][i] * v[c][i];
  }
  const float total = block_reduce<false>(sum_sq, scratch);
  const float inv_rms = rsqrtf(total / hidden + eps);

#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    float w[8];
    unpack_bf16x8(*reinterpret_cast<const Bf16x8*>(&ww[c]), w);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[c][i] = v[c][i] * inv_rms * w[i];
  }
  if constexpr (kFp8) {
    uint4 y[kChunks];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) y[c] = pack_bf16x8(v[c]);
    store_row_fp8<kChunks>(y, groups, static_cast<uint8_t*>(out) + r * hidden, out_scales + r, scratch);
  } else {
    __nv_bfloat16* o = static_cast<__nv_bfloat16*>(out) + r * hidden;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int g = threadIdx.x + c * blockDim.x;
      if (g < groups) store_bf16x8(o + 8 * g, v[c]);
    }
  }
}

template <bool kFp8>
void launch_rows(const __nv_bfloat16* x, float* residual, const __nv_bfloat16* weight, void* out,
                 float* out_scales, const int32_t* row_ids, int64_t num_rows, int64_t hidden, float eps,
                 cudaStream_t stream) {
  const RowLaunch shape = row_launch(hidden);
  auto kernel = shape.chunks == 1   ? rmsnorm_rows_kernel<1, kFp8>
                : shape.chunks == 2 ? rmsnorm_rows_kernel<2, kFp8>
                                    : rmsnorm_rows_kernel<4, kFp8>;
  launch_programmatic(kernel, dim3(static_cast<unsigned>(num_rows)), dim3(shape.threads), 0, stream,
                      "rmsnorm_rows_kernel", x, residual, weight, out, out_scales, row_ids,
                      static_cast<int>(hidden), eps);
}

void check_shape(float* residual, const __nv_bfloat16* weight, const void* out, int64_t num_rows,
                 int64_t hidden) {
  OPTIMATE_SHAPE_CHECK(num_rows >= 0 && num_rows < (int64_t{1} << 31) && hidden > 0 && hidden <= (1 << 20),
                       "rows {} hidden {}", num_rows, hidden);
  OPTIMATE_SHAPE_CHECK(residual && weight && out, "null pointer");
}

}  // namespace

bool rmsnorm_fp8_fits(int64_t hidden) { return row_launch(hidden).chunks > 0; }

void rmsnorm_residual(const __nv_bfloat16* x, float* residual, const __nv_bfloat16* weight,
                      __nv_bfloat16* out, const int32_t* row_ids, int64_t num_rows,
                      int64_t hidden, float eps, cudaStream_t stream, ElementwiseKernels kernels) {
  check_shape(residual, weight, out, num_rows, hidden);
  if (num_rows == 0) return;
  if (kernels == ElementwiseKernels::kCurrent && rmsnorm_fp8_fits(hidden)) {
    launch_rows<false>(x, residual, weight, out, nullptr, row_ids, num_rows, hidden, eps, stream);
    return;
  }
  launch_programmatic(rmsnorm_residual_kernel, dim3(static_cast<unsigned>(num_rows)),
                      dim3(kThreads), 0, stream, "rmsnorm_residual_kernel", x, residual, weight,
                      out, row_ids, static_cast<int>(hidden), eps);
}

void rmsnorm_residual_fp8(const __nv_bfloat16* x, float* residual, const __nv_bfloat16* weight,
                          const Fp8Activations& out, int64_t num_rows, int64_t hidden, float eps,
                          cudaStream_t stream) {
  check_shape(residual, weight, out.codes, num_rows, hidden);
  OPTIMATE_SHAPE_CHECK(out.scales, "null FP8 scales");
  OPTIMATE_SHAPE_CHECK(rmsnorm_fp8_fits(hidden), "FP8 RMSNorm: hidden {} (a multiple of 8, at most {})", hidden,
                       kRowMaxThreads * kRowMaxChunks * 8);
  if (num_rows == 0) return;
  launch_rows<true>(x, residual, weight, out.codes, out.scales, nullptr, num_rows, hidden, eps, stream);
}

}  // namespace optimate::cuda
