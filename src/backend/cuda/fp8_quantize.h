// FP8 (e4m3) rounding on the GPU: rows to codes with one scale each (weights at load, a wide
// step's activations per token), and the epilogue that turns an FP8 GEMM's raw fp32 sums into
// outputs. The rounding is model/fp8_quant.h's, bit for bit.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace optimate::cuda {

// A linear weight in FP8: y[., j] = (x . codes[j, :]) * scales[j].
struct Fp8Weight {
  const __nv_fp8_e4m3* codes = nullptr;  // [n, k] e4m3, k % 16 == 0
  const float* scales = nullptr;         // [n]
};

// Activations rounded to e4m3 per row, as quantize_fp8_rows writes them (and the row kernels
// whose outputs feed an FP8 linear: rmsnorm_residual_fp8, silu_mul_fp8).
struct Fp8Activations {
  __nv_fp8_e4m3* codes = nullptr;  // [rows, cols] e4m3
  float* scales = nullptr;         // [rows]
};

// x [rows, cols] bf16 -> codes [rows, cols] e4m3 and scales [rows] fp32 (absmax / 448;
// code = e4m3(x / scale), saturating). Needs cols % 8 == 0.
void quantize_fp8_rows(const __nv_bfloat16* x, int64_t rows, int64_t cols, __nv_fp8_e4m3* codes,
                       float* scales, cudaStream_t stream);

// y[i, j] = acc[i, j] * w_scale[j] * x_scale[i] (+ bias[j]) for i < m, j < n; acc [m, ldc]
// fp32; y [m, n] bf16 or fp32 (out_f32).
void fp8_scale_outputs(const float* acc, int64_t ldc, const float* w_scale, const float* x_scale,
                       const __nv_bfloat16* bias, void* y, bool out_f32, int64_t m, int64_t n,
                       cudaStream_t stream);

}  // namespace optimate::cuda
