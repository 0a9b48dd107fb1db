// Linear layers over Q8_0 / Q4_1 blocks kept as stored, against a double-precision product with
// the weights the model loader's dequantizer gives: every token count of the few-token kernels,
// the long-prefill path (sgemm on dequantized rows), both write modes, one and two threads.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "model/host_tensor.h"
#include "random_blocks.h"

namespace optimate::cpu {
namespace {

TEST(QuantizedLinear, MatchesADoubleReferenceOnTheDequantizedWeights) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t rows = 37;
  for (DType dtype : {DType::kQ8_0, DType::kQ4_1}) {
    for (int64_t cols : {int64_t{32}, int64_t{96}, int64_t{576}}) {
      CpuMatrix w;
      w.rows = rows;
      w.cols = cols;
      w.dtype = dtype;
      w.blocks = testing::random_blocks(dtype, rows * cols, static_cast<uint32_t>(cols));
      ASSERT_TRUE(w.is_quantized());
      std::vector<float> wf(static_cast<size_t>(rows * cols));
      dequantize_row(dtype, w.blocks.data(), wf.data(), rows * cols);
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 31, 32, 33, 40}) {
        std::vector<float> x(static_cast<size_t>(m * cols)), base(static_cast<size_t>(m * rows));
        for (float& v : x) v = dist(rng);
        for (float& v : base) v = dist(rng);
        for (bool accumulate : {false, true}) {
          for (int threads : {1, 2}) {
            std::vector<float> y = base;
            if (!accumulate) std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
            linear(x.data(), w, y.data(), m, accumulate, threads);
            for (int64_t t = 0; t < m; ++t)
              for (int64_t r = 0; r < rows; ++r) {
                double dot = 0.0, mag = 0.0;
                for (int64_t i = 0; i < cols; ++i) {
                  dot += double(x[t * cols + i]) * wf[r * cols + i];
                  mag += std::fabs(double(x[t * cols + i]) * wf[r * cols + i]);
                }
                const double want = accumulate ? base[t * rows + r] + dot : dot;
                ASSERT_NEAR(y[t * rows + r], want, 1e-6 * (1.0 + mag) + 1e-6 * std::fabs(want))
                    << dtype_name(dtype) << " cols " << cols << " tokens " << m << " row " << r
                    << " token " << t << " accumulate " << accumulate << " threads " << threads;
              }
          }
        }
      }
    }
  }
}

TEST(QuantizedLinear, KeepsOnlyTheTypesItReads) {
  EXPECT_TRUE(keeps_quantized(DType::kQ8_0, 576));
  EXPECT_TRUE(keeps_quantized(DType::kQ4_1, 64));
  EXPECT_FALSE(keeps_quantized(DType::kQ4_1, 48));  // not whole blocks
  EXPECT_FALSE(keeps_quantized(DType::kQ4_K, 256));
  EXPECT_FALSE(keeps_quantized(DType::kF16, 64));
  EXPECT_FALSE(keeps_quantized(DType::kF32, 64));
}

}  // namespace
}  // namespace optimate::cpu
