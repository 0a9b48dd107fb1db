// The integer dot-product kernels, one per instruction set (cpu_isa.h): rows of a repacked
// weight matrix (q8_matrix.h) against a group of rows of quantized activations
// (q8_activations.h).
//
// Per lane of four weights the kernels form the exact int32 dot product of the weight values
// and the activations' int8 values, then
//   y += float(dot) * scale_w * d_x + offset_w * (d_x * sum q_x)
// with the weight's scale and offset of the lane's group and the activation's group scale.
// AVX2: vpmaddubsw + vpmaddwd over 32 weights (u8 x s8; Q8_0 moves its sign onto the activation
// instead, since u8 values above 127 would saturate the 16-bit pair sums); AVX-512 VNNI: one
// vpdpbusd over 64 weights. A few rows go together when the token group is small, so each
// activation load serves several rows (decode), and a group of several tokens shares each
// decoded weight unit (prompts).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/q8_activations.h"
#include "backend/cpu/q8_matrix.h"

namespace optimate::cpu {

// Groups of up to this many tokens (decode) do too little arithmetic per weight byte for the
// hardware prefetcher alone to keep the weights streaming: each unit the kernels read asks for
// the bytes kQ8PrefetchBytes further on in the matrix (rows lie one after the other). On SmolLM2's
// single-sequence decode this took 1 thread from 37 to 55 tok/s (distances of 2-16 KB measured
// side by side, 4 KB the best; docs/benchmarks.md).
inline constexpr int kQ8PrefetchTokens = 2;
inline constexpr int64_t kQ8PrefetchBytes = 4096;
inline void q8_prefetch(const uint8_t* unit) {
  _mm_prefetch(reinterpret_cast<const char*>(unit) + kQ8PrefetchBytes, _MM_HINT_T0);
}

// y[t * out_stride + r] (+)= w.row(r) . x.row(t0 + t) for rows [row0, row0 + rows) and
// t < num_tokens (1 to q8_max_tokens(isa)); y points at token t0's row of the output.
using Q8Kernel = void (*)(const Q8Matrix& w, int64_t row0, int64_t rows, const Q8Activations& x,
                          int64_t t0, int64_t num_tokens, float* y, int64_t out_stride, bool accumulate);

Q8Kernel q8_kernel(CpuIsa isa);
int64_t q8_max_tokens(CpuIsa isa);

// The variants, compiled for their instruction sets (q8_kernel_*.cpp); call only on a
// processor that has it (cpu_supports).
void q8_rows_avx2(const Q8Matrix& w, int64_t row0, int64_t rows, const Q8Activations& x, int64_t t0,
                  int64_t num_tokens, float* y, int64_t out_stride, bool accumulate);
void q8_rows_avx512_vnni(const Q8Matrix& w, int64_t row0, int64_t rows, const Q8Activations& x,
                         int64_t t0, int64_t num_tokens, float* y, int64_t out_stride, bool accumulate);

}  // namespace optimate::cpu
