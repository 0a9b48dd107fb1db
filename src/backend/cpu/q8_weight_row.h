// One row of a block-quantized weight matrix as the integer kernels read it: one byte per
// weight, and per group of 16 weights a scale and an offset, so that every GGUF type the CPU
// loads (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K) reaches the kernels in one form:
//
//   weight[i] = scale[i / 16] * q[i] + offset[i / 16]
//
// q is unsigned (0..63: the nibbles and 5/6-bit values as stored), except for Q8_0 when the
// caller accepts signed bytes (the AVX2 kernels, which move the sign onto the activation); the
// VNNI kernels take Q8_0 as q + 128 with offset -128 * scale. The offsets multiply the
// activations' lane sums (q8_activations.h), so no kernel widens a weight to fp32.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/quantized_linear.h"

namespace optimate::cpu {

inline constexpr int64_t kWeightGroup = 16;

struct UnpackedRow {
  int64_t cols = 0;
  bool is_signed = false;      // q holds int8 (Q8_0 for the AVX2 kernels)
  std::vector<uint8_t> q;      // [cols], then 64 zero bytes a masked tail may touch
  std::vector<float> scale;    // [cols / 16], then 16 zeros
  std::vector<float> offset;   // [cols / 16], then 16 zeros
};

// The types the integer kernels read, for rows of `cols` (whole blocks of the type).
bool has_q8_kernel(DType dtype, int64_t cols);

// Unpacks row r of w (a quantized CpuMatrix of a type has_q8_kernel accepts) into out.
// signed_q8: Q8_0 stays signed (see above).
void unpack_weight_row(const CpuMatrix& w, int64_t r, bool signed_q8, UnpackedRow& out);

}  // namespace optimate::cpu
