// The integer dot-product kernels, one per instruction set (cpu_isa.h): one unpacked weight row
// (q8_weight_row.h) against a few rows of quantized activations (q8_activations.h).
//
// Per lane of four weights the kernels form the exact int32 dot product of q_w and q_x, then
//   y += float(dot) * scale_w * d_x + offset_w * (d_x * sum q_x)
// with the weight's scale/offset of the lane's group of 16 and the activation's block scale.
// AVX2: vpmaddubsw + vpmaddwd over 32 weights (u8 x s8; Q8_0 moves its sign onto the
// activation, since u8 values above 127 would saturate the 16-bit pair sums); AVX-512 VNNI:
// vpdpbusd over 64 weights (Q8_0 as q + 128 with offset -128 * scale).
#pragma once

#include <cstdint>

#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/q8_activations.h"
#include "backend/cpu/q8_weight_row.h"

namespace optimate::cpu {

// y[t * out_stride] (+)= w . x[t0 + t] for t < num_tokens (1 to q8_max_tokens(isa)).
// w must be unpacked with signed_q8 = q8_signed_weights(isa).
using Q8RowKernel = void (*)(const UnpackedRow& w, const Q8Activations& x, int64_t t0,
                             int64_t num_tokens, float* y, int64_t out_stride, bool accumulate);

Q8RowKernel q8_row_kernel(CpuIsa isa);
int64_t q8_max_tokens(CpuIsa isa);
bool q8_signed_weights(CpuIsa isa);

// The variants, compiled for their instruction sets (q8_kernel_*.cpp); call only on a
// processor that has it (cpu_supports).
void q8_row_avx2(const UnpackedRow& w, const Q8Activations& x, int64_t t0, int64_t num_tokens,
                 float* y, int64_t out_stride, bool accumulate);
void q8_row_avx512_vnni(const UnpackedRow& w, const Q8Activations& x, int64_t t0,
                        int64_t num_tokens, float* y, int64_t out_stride, bool accumulate);

}  // namespace optimate::cpu
