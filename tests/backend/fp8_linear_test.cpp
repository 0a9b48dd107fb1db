// The CPU's FP8 linear layer (the GPU kernels' twin): equal to the reference definition of
// model/fp8_quant.h up to fp32 summation order, and within the format's rounding bound of the
// fp32 product of the unquantized weights.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/fp8_linear.h"
#include "core/half.h"
#include "model/fp8_quant.h"

namespace optimate::cpu {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(dist(rng)));  // bf16 values, as the GPU holds them
  return v;
}

CpuMatrix fp32_matrix(const std::vector<float>& w, int64_t rows, int64_t cols) {
  CpuMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.f32 = w;
  return m;
}

// n = 48 crosses the switch at 9 tokens; n = 37, a width cuBLASLt's FP8 kernels do not take,
// never rounds its activations.
TEST(Fp8Linear, EqualsTheReferenceDefinitionOnBothSidesOfTheActivationSwitch) {
  for (const int64_t n : {int64_t{48}, int64_t{37}}) {
    const int64_t k = 96;
    const std::vector<float> w = random_values(n * k, 1, 0.05f);
    CpuMatrix m = fp32_matrix(w, n, k);
    quantize_matrix_fp8(m);
    const Fp8Matrix ref_w = quantize_fp8_matrix(w.data(), n, k);
    ASSERT_EQ(m.fp8_scales, ref_w.scales);
    EXPECT_EQ(fp8_rounds_activations(kFp8GemvMaxRows + 1, n), n == 48);
    for (int64_t tokens : {int64_t{1}, kFp8GemvMaxRows, kFp8GemvMaxRows + 1, int64_t{40}}) {
      const std::vector<float> x = random_values(tokens * k, 2, 1.0f);
      std::vector<float> got(tokens * n, 0.5f), ref(tokens * n);
      Fp8Scratch scratch;
      fp8_linear(x.data(), m, got.data(), tokens, /*accumulate=*/true, 1, scratch);
      fp8_linear_reference(x.data(), tokens, ref_w, ref.data());
      for (int64_t i = 0; i < tokens * n; ++i)
        ASSERT_NEAR(got[i], ref[i] + 0.5f, 1e-5f + 1e-5f * std::fabs(ref[i]))
            << "n " << n << " tokens " << tokens << " at " << i;
    }
  }
}

// e4m3 rounds a normal value within 2^-4 of itself and a subnormal within 2^-10 (half the step
// 2^-9), in units of the row's scale. So |x.w - x.dequant(w)| <= 2^-4 sum|x w| + 2^-10 scale
// sum|x|; rounding the activations too at most adds the same terms over x and their product.
TEST(Fp8Linear, StaysWithinTheFormatsRoundingBoundOfTheFp32Product) {
  const int64_t n = 64, k = 256;
  const std::vector<float> w = random_values(n * k, 3, 0.02f);
  CpuMatrix m = fp32_matrix(w, n, k);
  quantize_matrix_fp8(m);
  for (int64_t tokens : {int64_t{4}, int64_t{32}}) {
    const bool wide = fp8_rounds_activations(tokens, n);
    const std::vector<float> x = random_values(tokens * k, 4, 1.0f);
    std::vector<float> got(tokens * n);
    Fp8Scratch scratch;
    fp8_linear(x.data(), m, got.data(), tokens, false, 1, scratch);
    double err2 = 0, ref2 = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      float x_absmax = 0;
      for (int64_t j = 0; j < k; ++j) x_absmax = std::max(x_absmax, std::fabs(x[t * k + j]));
      const double x_step = wide ? x_absmax / 448.0 / 1024.0 : 0.0;
      for (int64_t r = 0; r < n; ++r) {
        float w_absmax = 0;
        for (int64_t j = 0; j < k; ++j) w_absmax = std::max(w_absmax, std::fabs(w[r * k + j]));
        const double w_step = w_absmax / 448.0 / 1024.0;
        double exact = 0, bound = 0;
        for (int64_t j = 0; j < k; ++j) {
          const double xv = x[t * k + j], wv = w[r * k + j];
          exact += xv * wv;
          const double ex = std::fabs(xv) / 16 + x_step, ew = std::fabs(wv) / 16 + w_step;
          bound += wide ? std::fabs(xv) * ew + std::fabs(wv) * ex + ex * ew : std::fabs(xv) * ew;
        }
        const double diff = std::fabs(got[t * n + r] - exact);
        ASSERT_LE(diff, bound * 1.001 + 1e-6) << "tokens " << tokens << " row " << r;
        err2 += diff * diff;
        ref2 += exact * exact;
      }
    }
    // In practice the errors cancel: a few percent of the output's magnitude, not the bound.
    const double rel_rms = std::sqrt(err2 / ref2);
    EXPECT_LT(rel_rms, wide ? 0.05 : 0.03) << "tokens " << tokens;
  }
}

}  // namespace
}  // namespace optimate::cpu
