#include "backend/cpu/small_m_linear.h"

#include <immintrin.h>

#include "backend/cpu/simd.h"
#include "core/error.h"

namespace optimate::cpu {
namespace {

// Each weight row is loaded once, 16 floats at a time, and multiplied into M tokens with two
// accumulators per token (2M independent FMA chains keep the FMA units busy even for M = 2).
template <int M>
void rows_for_tokens(const float* x, const float* w, float* y, int64_t in_dim, int64_t out_dim,
                     int64_t row0, int64_t rows, bool accumulate) {
  for (int64_t r = row0; r < row0 + rows; ++r) {
    const float* wr = w + r * in_dim;
    __m256 a0[M], a1[M];
    for (int t = 0; t < M; ++t) a0[t] = a1[t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= in_dim; i += 16) {
      const __m256 w0 = _mm256_loadu_ps(wr + i);
      const __m256 w1 = _mm256_loadu_ps(wr + i + 8);
      for (int t = 0; t < M; ++t) {
        a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + t * in_dim + i), a0[t]);
        a1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + t * in_dim + i + 8), a1[t]);
      }
    }
    for (int t = 0; t < M; ++t) {
      float acc = hsum(_mm256_add_ps(a0[t], a1[t]));
      for (int64_t j = i; j < in_dim; ++j) acc += wr[j] * x[t * in_dim + j];
      float& out = y[t * out_dim + r];
      out = accumulate ? out + acc : acc;  // never reads y unless asked: it may hold NaN
    }
  }
}

}  // namespace

void small_m_linear(const float* x, const float* w, float* y, int64_t num_tokens, int64_t in_dim,
                    int64_t out_dim, int64_t row0, int64_t rows, bool accumulate) {
  switch (num_tokens) {
    case 1: return rows_for_tokens<1>(x, w, y, in_dim, out_dim, row0, rows, accumulate);
    case 2: return rows_for_tokens<2>(x, w, y, in_dim, out_dim, row0, rows, accumulate);
    case 3: return rows_for_tokens<3>(x, w, y, in_dim, out_dim, row0, rows, accumulate);
    case 4: return rows_for_tokens<4>(x, w, y, in_dim, out_dim, row0, rows, accumulate);
    case 5: return rows_for_tokens<5>(x, w, y, in_dim, out_dim, row0, rows, accumulate);
    case 6: return rows_for_tokens<6>(x, w, y, in_dim, out_dim, row0, rows, accumulate);
    case 7: return rows_for_tokens<7>(x, w, y, in_dim, out_dim, row0, rows, accumulate);
    case 8: return rows_for_tokens<8>(x, w, y, in_dim, out_dim, row0, rows, accumulate);
    default: break;
  }
  OPTIMATE_CHECK(false, "small_m_linear takes 1 to {} tokens, got {}", kSmallMaxTokens, num_tokens);
}

}  // namespace optimate::cpu
