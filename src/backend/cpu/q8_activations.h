// Activations quantized to 8 bits once per matrix product, for the integer kernels of
// q8_linear.h: groups of 4 elements, each with its own fp32 scale d = max|x| / 127, so
// q = round(x / d) lies in [-127, 127] (never -128: the AVX2 kernels move signs onto the
// activations and |q| must stay representable). llama.cpp quantizes in blocks of 32 (Q8_0,
// Q8_1). The kernels here multiply each int32 lane (four products) by its own scale anyway, so
// smaller groups cost them nothing; on SmolLM2 against transformers the mean error of the top
// logits falls from 0.13 (groups of 16) to 0.075 (groups of 4), and the largest from 2.0 (groups
// of 32) to 0.61: the residual stream's and the MLP's outlier channels crush fewer neighbours.
// Scales and lane sums are kept apart from the int8 values, in the order the kernels read them.
#pragma once

#include <cstdint>
#include <vector>

namespace optimate::cpu {

inline constexpr int64_t kQ8Block = 32;  // elements quantized together
inline constexpr int64_t kQ8Lane = 4;    // elements per int32 lane of the dot-product kernels
inline constexpr int kQ8Scale = 4;       // elements per activation scale: one per int32 lane
inline constexpr int64_t kQ8Unit = 64;   // columns of one interleaved unit (a zmm of int8)
inline constexpr int64_t kQ8Rows = 8;    // rows stored together; kernels take groups within one

// Stored in groups of 8 rows (tokens), each group unit-major: for each unit of 64 columns, the
// group's 8 rows of 64 values (and of 16 lane scales, 16 lane sums) one after the other. A kernel
// reading up to 8 tokens of one group at one unit finds them at fixed offsets from one pointer,
// and a group's data is contiguous (a plain unit-major layout put a long prompt's units 8 KB
// apart, all in the same L1 sets). A row length that is an odd multiple of 32 ends in a half
// unit, padded with zeros.
struct Q8Activations {
  int64_t rows = 0;
  int64_t cols = 0;                // a multiple of kQ8Block
  std::vector<int8_t> q;           // [row groups, units, 8, 64]
  std::vector<float> lane_scale;   // [row groups, units, 8, 16]: the group's d, once per int32 lane
  std::vector<float> lane_sum;     // [row groups, units, 8, 16]: d * (sum of the lane's four q)

  int64_t units() const { return (cols + kQ8Unit - 1) / kQ8Unit; }
  // Index of (unit, row) in units of one row's unit.
  int64_t slot(int64_t unit, int64_t row) const { return ((row / kQ8Rows) * units() + unit) * kQ8Rows + row % kQ8Rows; }
  const int8_t* q_unit(int64_t unit, int64_t row) const { return q.data() + slot(unit, row) * kQ8Unit; }
  const float* scale_unit(int64_t unit, int64_t row) const { return lane_scale.data() + slot(unit, row) * 16; }
  const float* sum_unit(int64_t unit, int64_t row) const { return lane_sum.data() + slot(unit, row) * 16; }
};

// Sizes `out` for rows x cols (buffers only grow). cols must be a multiple of 32.
void resize_q8_activations(Q8Activations& out, int64_t rows, int64_t cols);

// Quantizes rows [row0, row1) of x ([out.rows, out.cols] fp32, row-major) into `out`; threads
// may fill disjoint row ranges of one resized `out`.
void quantize_activations(const float* x, int64_t row0, int64_t row1, Q8Activations& out);

// What an activation stands for after quantization, q * d, and its scale d (tests, references).
float dequantized_activation(const Q8Activations& a, int64_t row, int64_t col);
float activation_scale(const Q8Activations& a, int64_t row, int64_t col);
int8_t activation_q(const Q8Activations& a, int64_t row, int64_t col);
float activation_lane_sum(const Q8Activations& a, int64_t row, int64_t col);

}  // namespace optimate::cpu
