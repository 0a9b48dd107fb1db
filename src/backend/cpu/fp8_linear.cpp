#include "backend/cpu/fp8_linear.h"

#include <algorithm>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "core/half.h"
#include "model/fp8_quant.h"

namespace optimate::cpu {

void quantize_matrix_fp8(CpuMatrix& w) {
  OPTIMATE_CHECK(w.fp8_scales.empty(), "matrix is already FP8");
  std::vector<float> values(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    float* dst = values.data() + r * w.cols;
    if (!w.q8.empty()) dequantize_q8_row(w.q8, r, dst);
    else if (w.is_quantized()) dequantize_rows(w, r, 1, dst);
    else std::copy_n(w.f32.data() + r * w.cols, w.cols, dst);
  }
  for (float& v : values) v = bf16_to_f32(f32_to_bf16(v));
  const Fp8Matrix q = quantize_fp8_matrix(values.data(), w.rows, w.cols);
  for (size_t i = 0; i < values.size(); ++i) values[i] = fp8_decode(q.codes[i]);
  w.f32 = std::move(values);
  w.fp8_scales = q.scales;
  w.dtype = DType::kF32;
  w.blocks.clear();
  w.blocks.shrink_to_fit();
  w.q8 = Q8Matrix{};
}

void fp8_linear(const float* x, const CpuMatrix& w, float* y, int64_t num_tokens, bool accumulate,
                int num_threads, Fp8Scratch& s, bool round_activations) {
  const int64_t k = w.cols, n = w.rows;
  OPTIMATE_CHECK(!w.fp8_scales.empty(), "fp8_linear over a matrix that is not FP8");
  const float* in = x;
  s.scales.assign(static_cast<size_t>(num_tokens), 1.0f);
  if (round_activations && fp8_rounds_activations(num_tokens, n)) {
    s.x.resize(static_cast<size_t>(num_tokens * k));
    s.codes.resize(static_cast<size_t>(k));
    for (int64_t t = 0; t < num_tokens; ++t) {
      s.scales[t] = quantize_fp8_row(x + t * k, k, s.codes.data());
      for (int64_t j = 0; j < k; ++j) s.x[t * k + j] = fp8_decode(s.codes[j]);
    }
    in = s.x.data();
  }
  s.y.resize(static_cast<size_t>(num_tokens * n));
  linear(in, w.f32.data(), s.y.data(), num_tokens, k, n, false, num_threads);
  for (int64_t t = 0; t < num_tokens; ++t)
    for (int64_t r = 0; r < n; ++r) {
      const float v = s.y[t * n + r] * w.fp8_scales[r] * s.scales[t];
      y[t * n + r] = accumulate ? y[t * n + r] + v : v;
    }
}

}  // namespace optimate::cpu
