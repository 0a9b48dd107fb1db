// The few-token linear kernel against a double-precision reference: every token count it takes,
// lengths that leave a tail past its 16-float steps, a row slice, and both write modes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/small_m_linear.h"

namespace optimate::cpu {
namespace {

TEST(SmallMLinear, MatchesADoubleReference) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t m = 1; m <= kSmallMaxTokens; ++m) {
    for (int64_t in_dim : {int64_t{5}, int64_t{37}, int64_t{576}}) {
      const int64_t out_dim = 23;
      std::vector<float> x(m * in_dim), w(out_dim * in_dim), base(m * out_dim);
      for (float& v : x) v = dist(rng);
      for (float& v : w) v = dist(rng);
      for (float& v : base) v = dist(rng);
      for (bool accumulate : {false, true}) {
        // Rows outside the slice [3, 19) must stay as they were; with accumulate off the slice
        // starts as NaN, which must never reach the result.
        std::vector<float> y = base;
        for (int64_t t = 0; t < m; ++t)
          for (int64_t r = 3; r < 19 && !accumulate; ++r) y[t * out_dim + r] = std::numeric_limits<float>::quiet_NaN();
        small_m_linear(x.data(), w.data(), y.data(), m, in_dim, out_dim, 3, 16, accumulate);
        for (int64_t t = 0; t < m; ++t)
          for (int64_t r = 0; r < out_dim; ++r) {
            double want = base[t * out_dim + r];
            if (r >= 3 && r < 19) {
              double dot = 0.0;
              for (int64_t i = 0; i < in_dim; ++i) dot += double(x[t * in_dim + i]) * w[r * in_dim + i];
              want = accumulate ? want + dot : dot;
            }
            EXPECT_NEAR(y[t * out_dim + r], want, 1e-4 * (1.0 + std::sqrt(double(in_dim))))
                << "m " << m << " in " << in_dim << " row " << r << " token " << t << " acc " << accumulate;
          }
      }
    }
  }
}

}  // namespace
}  // namespace optimate::cpu
