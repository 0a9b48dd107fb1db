// FP8 (e4m3) weights and activations, the host side: the rounding both backends share, so the
// CPU backend is the GPU kernels' twin. A linear weight [n, k] keeps e4m3 codes and one fp32
// scale per output row (absmax / 448); a wide step also rounds its activations to e4m3 with one
// scale per token, so the product runs on FP8 tensor cores. Codes round to nearest even and
// saturate at ±448, exactly as CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/setting_choices.h"  // WeightQuantization

namespace optimate {

// Steps of at most this many tokens keep their activations in their own precision and multiply
// by the dequantized weights (the GPU's FP8 GEMV, bandwidth-bound: the weight bytes are the
// cost, so rounding the activations would buy nothing); wider steps quantize them per token
// for the FP8 GEMM. Both backends switch at the same width so they agree token for token.
inline constexpr int64_t kFp8GemvMaxRows = 8;

// Linear weights need rows of whole 16-byte loads (the GEMV) and cuBLASLt's FP8 alignment.
inline constexpr int64_t kFp8ColsMultiple = 16;

// Whether a linear layer of m tokens and n outputs rounds its activations per token (the FP8
// GEMM path): past kFp8GemvMaxRows tokens, and only where cuBLASLt's FP8 kernels take the
// width (n a multiple of 16; every projection of the models served is). Narrower products of
// any width stay on the GEMV's path, eight rows at a time.
inline bool fp8_rounds_activations(int64_t m, int64_t n) { return m > kFp8GemvMaxRows && n % 16 == 0; }

// absmax / 448: the scale that maps a row's largest magnitude onto e4m3's largest finite value.
inline float fp8_scale_for(float absmax) { return absmax / 448.0f; }

// One row of n values to e4m3 codes with its scale: code = e4m3(x / scale); an all-zero row
// gets scale 0 and zero codes.
float quantize_fp8_row(const float* x, int64_t n, uint8_t* codes);

// rows x cols row-major values, quantized row by row.
struct Fp8Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> codes;  // [rows, cols] e4m3
  std::vector<float> scales;   // [rows]
};
Fp8Matrix quantize_fp8_matrix(const float* values, int64_t rows, int64_t cols);

// e4m3 code -> float (exact); a 256-entry table.
float fp8_decode(uint8_t code);

// y[m, n] = x[m, k] . dequant(w)^T, accumulated in fp32, each output scaled by its weight row's
// scale, with x rounded per token to e4m3 (and its scale) first when fp8_rounds_activations. The
// reference both backends' FP8 kernels are tested against.
void fp8_linear_reference(const float* x, int64_t m, const Fp8Matrix& w, float* y);

}  // namespace optimate
