// Row quantization to e4m3 and the FP8 GEMM's scaling epilogue (fp8_quantize.h).
//
// quantize_rows_kernel: one block of 256 threads per row; each thread reads 8 bf16 (16 bytes)
// at a time, the block reduces the row's absmax, then the same threads write 8 codes (8 bytes)
// each. Exact division (__fdiv_rn) as the host twin divides, so codes match bit for bit.
// scale_outputs_kernel: grid-stride over m * n outputs.
#include "backend/cuda/fp8_quantize.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/row_kernel.cuh"

namespace optimate::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    quantize_rows_kernel(const __nv_bfloat16* x, int64_t cols, __nv_fp8_e4m3* codes, float* scales) {
  __shared__ float warp_max[kThreads / 32];
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* src = x + row * cols;
  float absmax = 0.0f;
  for (int64_t c = threadIdx.x * 8; c < cols; c += kThreads * 8) {
    float v[8];
    load_bf16x8(src + c, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) absmax = fmaxf(absmax, fabsf(v[i]));
  }
  absmax = group_max(absmax);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = absmax;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total = fmaxf(total, warp_max[w]);
  const float scale = __fdiv_rn(total, 448.0f);
  if (threadIdx.x == 0) scales[row] = scale;
  uint8_t* dst = reinterpret_cast<uint8_t*>(codes) + row * cols;
  for (int64_t c = threadIdx.x * 8; c < cols; c += kThreads * 8) {
    float v[8];
    load_bf16x8(src + c, v);
    *reinterpret_cast<uint2*>(dst + c) = fp8_codes8(v, scale);
  }
}

__global__ void scale_outputs_kernel(const float* acc, int64_t ldc, const float* w_scale,
                                     const float* x_scale, const __nv_bfloat16* bias, void* y,
                                     bool out_f32, int64_t m, int64_t n) {
  const int64_t total = m * n;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / n, j = idx % n;
    float v = acc[i * ldc + j] * w_scale[j] * x_scale[i];
    if (bias) v += __bfloat162float(bias[j]);
    if (out_f32) static_cast<float*>(y)[idx] = v;
    else static_cast<__nv_bfloat16*>(y)[idx] = __float2bfloat16(v);
  }
}

}  // namespace

void quantize_fp8_rows(const __nv_bfloat16* x, int64_t rows, int64_t cols, __nv_fp8_e4m3* codes,
                       float* scales, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(rows >= 0 && cols > 0 && cols % 8 == 0 && rows < (int64_t{1} << 31),
                       "rows {} cols {} (cols a multiple of 8)", rows, cols);
  OPTIMATE_SHAPE_CHECK(x && codes && scales, "null operand");
  if (rows == 0) return;
  quantize_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, cols, codes, scales);
  OPTIMATE_CUDA_CHECK_LAUNCH("quantize_rows_kernel");
}

void fp8_scale_outputs(const float* acc, int64_t ldc, const float* w_scale, const float* x_scale,
                       const __nv_bfloat16* bias, void* y, bool out_f32, int64_t m, int64_t n,
                       cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(m >= 0 && n > 0 && ldc >= n, "m {} n {} ldc {}", m, n, ldc);
  OPTIMATE_SHAPE_CHECK(acc && w_scale && x_scale && y, "null operand");
  if (m == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((m * n + kThreads - 1) / kThreads, 8192));
  scale_outputs_kernel<<<blocks, kThreads, 0, stream>>>(acc, ldc, w_scale, x_scale, bias, y, out_f32, m, n);
  OPTIMATE_CUDA_CHECK_LAUNCH("scale_outputs_kernel");
}

}  // namespace optimate::cuda
