// A quantized weight matrix repacked at load for the integer kernels (q8_kernels.h): every GGUF
// type they read (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K) in one layout, so one kernel per
// instruction set serves them all and decodes a unit of 64 weights in a few instructions.
//
// Row r is `units` units of 64 weights, each unit_bytes long:
//   values   4-bit types: 32 bytes, byte j = weight j | weight (j + 32) << 4
//            others: 64 bytes, one per weight (Q8_0 as q + 128)
//   scales   64 / group values, then the same number of offsets:
//            weight = scale[g] * value + offset[g]  (g = index in unit / group)
// group is 32, or 16 for Q6_K. A row length that is an odd multiple of 32 ends in a half unit
// padded with zero values, scales and offsets. The values are the file's own. Q8_0, Q4_0 and
// Q4_1 keep their scales and offsets as fp16, as the file does (-8 d and -128 d are exact
// there): 40 bytes per 64 weights for Q4_0/Q4_1 (the file's 36-40), so a decode step streams no
// more than the file's bytes. The K-quants' scales are products of two factors (the sub-block's
// 6- or 8-bit scale times the super-block's fp16), kept as the fp32 values ggml's dequantizer
// forms. Either way the kernels see exactly the weights the loader dequantizes.
#pragma once

#include <cstdint>
#include <vector>

namespace optimate::cpu {

struct CpuMatrix;

struct Q8Matrix {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t units = 0;       // per row: cols / 64, rounded up
  int64_t unit_bytes = 0;
  int group = 32;
  bool four_bit = false;
  bool biased = false;     // values are q + 128 (Q8_0), offsets -128 * scale
  bool half_scales = false;  // scales and offsets stored as fp16
  std::vector<uint8_t> data;  // [rows, units, unit_bytes]

  bool empty() const { return data.empty(); }
  const uint8_t* row(int64_t r) const { return data.data() + r * units * unit_bytes; }
  int64_t value_bytes() const { return four_bit ? 32 : 64; }
  int64_t bytes() const { return static_cast<int64_t>(data.size()); }
};

// Repacks a matrix held as GGUF blocks of a type has_q8_kernel accepts.
Q8Matrix pack_q8_matrix(const CpuMatrix& w);

// Row r as fp32 (scale * value + offset): embedding lookups of a repacked table.
void dequantize_q8_row(const Q8Matrix& m, int64_t r, float* dst);

}  // namespace optimate::cpu
