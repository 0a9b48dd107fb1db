#include "model/fp8_quant.h"

#include <array>
#include <cmath>

#include "core/error.h"
#include "kv/kv_format.h"

namespace optimate {

float quantize_fp8_row(const float* x, int64_t n, uint8_t* codes) {
  float absmax = 0.0f;
  for (int64_t i = 0; i < n; ++i) absmax = std::fmax(absmax, std::fabs(x[i]));
  const float scale = fp8_scale_for(absmax);
  for (int64_t i = 0; i < n; ++i) codes[i] = scale != 0.0f ? kv::f32_to_e4m3(x[i] / scale) : 0;
  return scale;
}

Fp8Matrix quantize_fp8_matrix(const float* values, int64_t rows, int64_t cols) {
  Fp8Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.codes.resize(static_cast<size_t>(rows * cols));
  m.scales.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    m.scales[r] = quantize_fp8_row(values + r * cols, cols, m.codes.data() + r * cols);
  return m;
}

float fp8_decode(uint8_t code) {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = kv::e4m3_to_f32(static_cast<uint8_t>(c));
    return t;
  }();
  return table[code];
}

void fp8_linear_reference(const float* x, int64_t m, const Fp8Matrix& w, float* y) {
  const int64_t k = w.cols, n = w.rows;
  std::vector<float> wr(w.codes.size());
  for (size_t i = 0; i < wr.size(); ++i) wr[i] = fp8_decode(w.codes[i]);
  std::vector<float> xr(static_cast<size_t>(k));
  std::vector<uint8_t> xq(static_cast<size_t>(k));
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * k;
    float x_scale = 1.0f;
    if (fp8_rounds_activations(m, w.rows)) {
      x_scale = quantize_fp8_row(xi, k, xq.data());
      for (int64_t j = 0; j < k; ++j) xr[j] = fp8_decode(xq[j]);
    } else {
      for (int64_t j = 0; j < k; ++j) xr[j] = xi[j];
    }
    for (int64_t r = 0; r < n; ++r) {
      const float* row = wr.data() + r * k;
      double acc = 0.0;
      for (int64_t j = 0; j < k; ++j) acc += static_cast<double>(xr[j]) * row[j];
      y[i * n + r] = static_cast<float>(acc) * w.scales[r] * x_scale;
    }
  }
}

}  // namespace optimate
