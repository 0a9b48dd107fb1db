// Activations quantized to 8 bits once per matrix product, for the integer kernels of
// q8_linear.h: groups of 16 elements, each with its own fp32 scale d = max|x| / 127, so
// q = round(x / d) lies in [-127, 127] (never -128: the AVX2 kernels move signs onto the
// activations and |q| must stay representable). llama.cpp quantizes in blocks of 32 (Q8_0,
// Q8_1); the kernels here read one scale per lane of four, so groups of 16 cost them nothing,
// and on SmolLM2 they cut the largest logit error against fp32 from 2.0 to 0.61 (the outlier
// channels of the residual stream and the MLP crush fewer neighbours). Scales and sums are kept
// apart from the int8 values, in the order the kernels read them.
#pragma once

#include <cstdint>
#include <vector>

namespace optimate::cpu {

inline constexpr int64_t kQ8Block = 32;  // elements quantized together (a whole row's unit)
inline constexpr int64_t kQ8Lane = 4;
#ifndef Q8S
#define Q8S 8
#endif
inline constexpr int kQ8Scale = Q8S;    // elements per int32 lane of the dot-product kernels

struct Q8Activations {
  int64_t rows = 0;
  int64_t cols = 0;                // a multiple of kQ8Block
  std::vector<int8_t> q;           // [rows, cols]
  std::vector<float> lane_scale;   // [rows, cols / 4]: the group's d, once per int32 lane
  std::vector<float> lane_sum;     // [rows, cols / 4]: d * (sum of the lane's four q)

  const int8_t* q_row(int64_t r) const { return q.data() + r * cols; }
  const float* lane_scale_row(int64_t r) const { return lane_scale.data() + r * (cols / kQ8Lane); }
  const float* lane_sum_row(int64_t r) const { return lane_sum.data() + r * (cols / kQ8Lane); }
};

// Sizes `out` for rows x cols (buffers only grow). cols must be a multiple of 32.
void resize_q8_activations(Q8Activations& out, int64_t rows, int64_t cols);

// Quantizes rows [row0, row1) of x ([out.rows, out.cols] fp32, row-major) into `out`; threads
// may fill disjoint row ranges of one resized `out`.
void quantize_activations(const float* x, int64_t row0, int64_t row1, Q8Activations& out);

// The value an activation stands for after quantization: q * d (tests, references).
float dequantized_activation(const Q8Activations& a, int64_t row, int64_t col);

}  // namespace optimate::cpu
