// Linear layers with 8-bit activations: the input rows are quantized once per matrix product
// (q8_activations.h), then blocks of weight rows (repacked at load, q8_matrix.h) meet the tokens
// in groups through the integer kernel of the chosen instruction set (q8_kernels.h). The same
// code serves decode rows and prompt tiles: nothing is widened to fp32.
#pragma once

#include <cstdint>

#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/cpu_thread_pool.h"
#include "backend/cpu/q8_activations.h"
#include "backend/cpu/quantized_linear.h"

namespace optimate::cpu {

// y[t, r] (+)= w[r, :] . x[t, :] for rows [row0, row0 + rows) of w and every row t of x;
// y is [x.rows, out_stride].
void q8_linear_rows(const Q8Activations& x, const Q8Matrix& w, float* y, int64_t out_stride,
                    int64_t row0, int64_t rows, bool accumulate, CpuIsa isa);

// y = x w^T (+ y when accumulate) for x [num_tokens, w.cols] fp32: quantizes x into `scratch`
// (groups of 8 tokens as chunks of the pool), then w's rows in chunks of 64.
void q8_linear(const float* x, const Q8Matrix& w, float* y, int64_t num_tokens, bool accumulate,
               CpuThreadPool& pool, CpuIsa isa, Q8Activations& scratch);

}  // namespace optimate::cpu
