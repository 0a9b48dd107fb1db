// RMSNorm fused with the residual add that precedes it in a pre-norm decoder.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/elementwise_kernels.h"
#include "backend/cuda/fp8_quantize.h"

namespace optimate::cuda {

// For each output row r (source row s = row_ids ? row_ids[r] : r):
//   residual[s] += x[s]            (skipped when x is null: the first layer's input)
//   out[r] = residual[s] / rms(residual[s]) * weight
// x: [*, hidden] bf16 or null; residual: [*, hidden] fp32, updated in place;
// weight: [hidden] bf16; out: [num_rows, hidden] bf16; row_ids: [num_rows] int32 or null.
// kCurrent takes the row kernel where rmsnorm_fp8_fits(hidden), the baseline elsewhere.
void rmsnorm_residual(const __nv_bfloat16* x, float* residual, const __nv_bfloat16* weight,
                      __nv_bfloat16* out, const int32_t* row_ids, int64_t num_rows,
                      int64_t hidden, float eps, cudaStream_t stream,
                      ElementwiseKernels kernels = ElementwiseKernels::kCurrent);

// Whether the row kernel takes rows of `hidden` elements (a multiple of 8, at most 16384).
bool rmsnorm_fp8_fits(int64_t hidden);

// rmsnorm_residual over rows [0, num_rows) whose output feeds an FP8 linear: each normalised row
// is rounded to bf16 and then to e4m3 with its own scale, so `out` holds exactly what
// quantize_fp8_rows makes of rmsnorm_residual's bf16 output, without that output's round trip
// through memory. Needs rmsnorm_fp8_fits(hidden).
void rmsnorm_residual_fp8(const __nv_bfloat16* x, float* residual, const __nv_bfloat16* weight,
                          const Fp8Activations& out, int64_t num_rows, int64_t hidden, float eps,
                          cudaStream_t stream);

}  // namespace optimate::cuda
