// Linear layers over weights kept in their file's block-quantized form (GGUF Q8_0, Q4_1), so a
// decode step streams 1.06 or 0.625 bytes per weight instead of 4. The weights are exactly the
// values the fp32 path dequantizes; only the order of the sums differs.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/q8_matrix.h"
#include "core/dtype.h"

namespace optimate::cpu {

// A Linear weight [rows, cols] as the CPU runner holds it: the file's quantization blocks, row
// after row, where the kernels here read them (Q8_0, Q4_1); or those of any type the integer
// kernels read, repacked for them (q8_matrix.h); else fp32.
struct CpuMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> f32;      // [rows, cols]; empty when quantized
  DType dtype = DType::kF32;   // of the file's blocks
  std::vector<uint8_t> blocks;  // rows * row_bytes(); empty when fp32 or repacked
  Q8Matrix q8;                  // the integer kernels' layout; empty otherwise
  std::vector<float> fp8_scales;  // [rows] with FP8 weights (fp8_linear.h): f32 holds e4m3 values

  bool is_quantized() const { return !blocks.empty() || !q8.empty(); }
  int64_t row_bytes() const;  // of a quantized row
  const uint8_t* row(int64_t r) const { return blocks.data() + r * row_bytes(); }
  int64_t bytes() const;
};

// The types the kernels here read directly (others are widened to fp32 at load), for rows of
// `cols` elements (a whole number of blocks).
bool keeps_quantized(DType dtype, int64_t cols);

// y[t, r] = x[t, :] . w[r, :] (+ y[t, r] when accumulate) for rows [row0, row0 + rows) of w and
// every token t < num_tokens; x is [num_tokens, w.cols], y is [num_tokens, out_stride]. Tokens go
// in groups of eight, each weight block widened once per group.
void quantized_linear_rows(const float* x, const CpuMatrix& w, float* y, int64_t num_tokens,
                           int64_t out_stride, int64_t row0, int64_t rows, bool accumulate);

// Dequantizes rows [row0, row0 + rows) into dst ([rows, w.cols] fp32).
void dequantize_rows(const CpuMatrix& w, int64_t row0, int64_t rows, float* dst);

}  // namespace optimate::cpu
