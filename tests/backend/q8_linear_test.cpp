// The integer kernels (8-bit activations) for every weight type the CPU loads, every
// instruction-set variant this processor runs (each forced in turn), token counts from one to
// past several kernel groups, against double-precision references:
//  - exact arithmetic on the same quantized values (the dequantized weights times the
//    dequantized activations): only fp32 rounding may differ;
//  - the unquantized fp32 activations: the error stays within what rounding each activation to
//    the nearest of 255 levels allows, sum |w_i| * d_i / 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/q8_linear.h"
#include "backend/cpu/q8_weight_row.h"
#include "model/host_tensor.h"
#include "random_blocks.h"

namespace optimate::cpu {
namespace {

constexpr DType kTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

std::vector<int64_t> cols_for(DType t) {
  const bool k = dtype_block_elems(t) == 256;
  return k ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 96, 576};
}

CpuMatrix random_matrix(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  CpuMatrix w;
  w.rows = rows;
  w.cols = cols;
  w.dtype = dtype;
  w.blocks = testing::random_blocks(dtype, rows * cols, seed);
  return w;
}

std::string where(CpuIsa isa, DType t, int64_t cols, int64_t m) {
  return std::string(cpu_isa_name(isa)) + " " + std::string(dtype_name(t)) + " cols " + std::to_string(cols) +
         " tokens " + std::to_string(m);
}

TEST(Q8Kernels, EveryVariantThisProcessorRunsIsTested) {
  const auto isas = supported_cpu_isas();
  ASSERT_FALSE(isas.empty()) << describe_cpu_features();
  EXPECT_EQ(isas.back(), best_cpu_isa());
  std::printf("integer kernels tested here: ");
  for (CpuIsa isa : isas) std::printf("%s ", std::string(cpu_isa_name(isa)).c_str());
  std::printf("(%s)\n", describe_cpu_features().c_str());
}

TEST(Q8Kernels, UnpackedRowsGiveTheLoaderDequantizedWeights) {
  for (DType t : kTypes)
    for (int64_t cols : cols_for(t))
      for (bool signed_q8 : {false, true}) {
        const CpuMatrix w = random_matrix(t, 3, cols, 7);
        std::vector<float> want(static_cast<size_t>(cols));
        UnpackedRow row;
        for (int64_t r = 0; r < w.rows; ++r) {
          dequantize_row(t, w.row(r), want.data(), cols);
          unpack_weight_row(w, r, signed_q8, row);
          for (int64_t i = 0; i < cols; ++i) {
            const float q = row.is_signed ? static_cast<float>(static_cast<int8_t>(row.q[i])) : row.q[i];
            const float got = row.scale[i / kWeightGroup] * q + row.offset[i / kWeightGroup];
            ASSERT_NEAR(got, want[i], 1e-6f * (std::fabs(want[i]) + std::fabs(row.offset[i / kWeightGroup])) + 1e-30f)
                << dtype_name(t) << " row " << r << " element " << i << " signed " << signed_q8;
          }
        }
      }
}

TEST(Q8Kernels, RepackedMatricesHoldTheLoaderDequantizedWeights) {
  for (DType t : kTypes)
    for (int64_t cols : cols_for(t)) {
      const CpuMatrix w = random_matrix(t, 3, cols, 8);
      const Q8Matrix m = pack_q8_matrix(w);
      std::vector<float> want(static_cast<size_t>(cols)), got(static_cast<size_t>(cols));
      for (int64_t r = 0; r < w.rows; ++r) {
        dequantize_row(t, w.row(r), want.data(), cols);
        dequantize_q8_row(m, r, got.data());
        float scale = 0.0f;  // offsets make the rounding relative to the row's magnitude
        for (float v : want) scale = std::max(scale, std::fabs(v));
        for (int64_t i = 0; i < cols; ++i)
          ASSERT_NEAR(got[i], want[i], 1e-6f * scale)
              << dtype_name(t) << " cols " << cols << " row " << r << " element " << i;
      }
    }
}

TEST(Q8Kernels, ActivationsRoundToTheNearestOf255LevelsPerGroup) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  const int64_t rows = 3, cols = 96;
  std::vector<float> x(rows * cols);
  for (float& v : x) v = dist(rng);
  std::fill_n(x.begin() + 32, 16, 0.0f);  // an all-zero group
  Q8Activations a;
  resize_q8_activations(a, rows, cols);
  quantize_activations(x.data(), 0, rows, a);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / kQ8Scale; ++b) {
      float amax = 0.0f;
      for (int i = 0; i < kQ8Scale; ++i) amax = std::max(amax, std::fabs(x[r * cols + b * kQ8Scale + i]));
      const float d = activation_scale(a, r, b * kQ8Scale);
      EXPECT_FLOAT_EQ(d, amax / 127.0f);
      for (int i = 0; i < kQ8Scale; ++i) {
        const int64_t c = b * kQ8Scale + i;
        EXPECT_LE(std::abs(int{activation_q(a, r, c)}), 127);
        EXPECT_LE(std::fabs(dequantized_activation(a, r, c) - x[r * cols + c]), d * 0.5f * (1 + 1e-5f)) << r << " " << c;
      }
      for (int lane = 0; lane < kQ8Scale / 4; ++lane) {
        int s = 0;
        for (int i = 0; i < 4; ++i) s += activation_q(a, r, b * kQ8Scale + lane * 4 + i);
        EXPECT_FLOAT_EQ(activation_lane_sum(a, r, b * kQ8Scale + lane * 4), d * static_cast<float>(s));
      }
    }
}

TEST(Q8Kernels, MatchDoubleReferencesForEveryTypeTokenCountAndVariant) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t rows = 37;
  for (CpuIsa isa : supported_cpu_isas())
    for (DType t : kTypes)
      for (int64_t cols : cols_for(t)) {
        const CpuMatrix w = random_matrix(t, rows, cols, static_cast<uint32_t>(cols) + static_cast<uint32_t>(t));
        const Q8Matrix packed = pack_q8_matrix(w);
        std::vector<float> wf(static_cast<size_t>(rows * cols));
        dequantize_row(t, w.blocks.data(), wf.data(), rows * cols);
        for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 33}) {
          std::vector<float> x(static_cast<size_t>(m * cols));
          for (float& v : x) v = dist(rng);
          Q8Activations a;
          resize_q8_activations(a, m, cols);
          quantize_activations(x.data(), 0, m, a);
          std::vector<float> y(static_cast<size_t>(m * rows), std::numeric_limits<float>::quiet_NaN());
          q8_linear_rows(a, packed, y.data(), rows, 0, rows, /*accumulate=*/false, isa);
          for (int64_t tk = 0; tk < m; ++tk)
            for (int64_t r = 0; r < rows; ++r) {
              double same = 0.0, exact = 0.0, mag = 0.0, bound = 0.0;
              for (int64_t i = 0; i < cols; ++i) {
                const double wi = wf[r * cols + i];
                const double xq = dequantized_activation(a, tk, i);
                same += wi * xq;
                exact += wi * x[tk * cols + i];
                mag += std::fabs(wi * xq);
                bound += std::fabs(wi) * activation_scale(a, tk, i) * 0.5;
              }
              const double got = y[tk * rows + r];
              ASSERT_NEAR(got, same, 2e-6 * mag + 1e-30) << where(isa, t, cols, m) << " row " << r << " token " << tk;
              ASSERT_LE(std::fabs(got - exact), bound * (1 + 1e-4) + 2e-6 * mag)
                  << where(isa, t, cols, m) << " row " << r << " token " << tk;
            }
        }
      }
}

TEST(Q8Kernels, LinearSplitsRowsAndTokensAcrossThreadsAndAccumulates) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t rows = 200, cols = 576;
  for (CpuIsa isa : supported_cpu_isas())
    for (DType t : {DType::kQ8_0, DType::kQ4_1}) {
      const Q8Matrix w = pack_q8_matrix(random_matrix(t, rows, cols, 9));
      for (int64_t m : {1, 6, 40}) {
        std::vector<float> x(static_cast<size_t>(m * cols)), base(static_cast<size_t>(m * rows));
        for (float& v : x) v = dist(rng);
        for (float& v : base) v = dist(rng);
        Q8Activations a;
        resize_q8_activations(a, m, cols);
        quantize_activations(x.data(), 0, m, a);
        std::vector<float> want(static_cast<size_t>(m * rows));
        q8_linear_rows(a, w, want.data(), rows, 0, rows, false, isa);
        for (bool accumulate : {false, true})
          for (int threads : {1, 2}) {
            std::vector<float> y = base;
            Q8Activations scratch;
            CpuThreadPool pool(threads);
            q8_linear(x.data(), w, y.data(), m, accumulate, pool, isa, scratch);
            for (int64_t i = 0; i < m * rows; ++i)
              ASSERT_FLOAT_EQ(y[i], accumulate ? base[i] + want[i] : want[i])
                  << where(isa, t, cols, m) << " element " << i << " threads " << threads;
          }
      }
    }
}

TEST(Q8Kernels, RefuseTypesWithoutAKernel) {
  EXPECT_FALSE(has_q8_kernel(DType::kF32, 64));
  EXPECT_FALSE(has_q8_kernel(DType::kQ4_K, 32));  // not whole super-blocks
  EXPECT_FALSE(has_q8_kernel(DType::kQ4_1, 48));
  EXPECT_TRUE(has_q8_kernel(DType::kQ6_K, 512));
}

}  // namespace
}  // namespace optimate::cpu
