// RMSNorm fused with the residual add that precedes it in a pre-norm decoder.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace optimate::cuda {

// For each output row r (source row s = row_ids ? row_ids[r] : r):
//   residual[s] += x[s]            (skipped when x is null: the first layer's input)
//   out[r] = residual[s] / rms(residual[s]) * weight
// x: [*, hidden] bf16 or null; residual: [*, hidden] fp32, updated in place;
// weight: [hidden] bf16; out: [num_rows, hidden] bf16; row_ids: [num_rows] int32 or null.
void rmsnorm_residual(const __nv_bfloat16* x, float* residual, const __nv_bfloat16* weight,
                      __nv_bfloat16* out, const int32_t* row_ids, int64_t num_rows,
                      int64_t hidden, float eps, cudaStream_t stream);

}  // namespace optimate::cuda
