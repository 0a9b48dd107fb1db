#include "backend/cpu/q8_activations.h"

#include <immintrin.h>

#include <algorithm>

#include "core/error.h"

namespace optimate::cpu {
namespace {

template <typename T>
void grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// 32 elements in groups of four: int8 values, and per group (an int32 lane of the kernels) its
// scale and d * (sum of its q).
inline void quantize_block(const float* x, int8_t* q, float* lane_scale, float* lane_sum) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4], m[4];
  for (int j = 0; j < 4; ++j) {
    v[j] = _mm256_loadu_ps(x + 8 * j);
    m[j] = _mm256_andnot_ps(sign, v[j]);
  }
  // Each element's group maximum, broadcast over its group of four (a 128-bit half's quarter).
  static_assert(kQ8Scale == 4);
  for (int j = 0; j < 4; ++j) {
    const __m256 t = _mm256_max_ps(m[j], _mm256_permute_ps(m[j], 0xB1));
    m[j] = _mm256_max_ps(t, _mm256_permute_ps(t, 0x4E));
  }
  __m256i i[4];
  float d[32];
  for (int j = 0; j < 4; ++j) {
    const __m256 nonzero = _mm256_cmp_ps(m[j], _mm256_setzero_ps(), _CMP_GT_OQ);
    const __m256 inv = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(127.0f), m[j]), nonzero);
    i[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], inv));  // nearest
    _mm256_storeu_ps(d + 8 * j, _mm256_div_ps(m[j], _mm256_set1_ps(127.0f)));
  }
  // Packing interleaves 128-bit halves; the permute restores element order.
  const __m256i p16a = _mm256_packs_epi32(i[0], i[1]);
  const __m256i p16b = _mm256_packs_epi32(i[2], i[3]);
  const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b),
                                                 _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), p8);
  // Lane sums: each 32-bit lane of p8 holds four consecutive q.
  const __m256i lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), p8), _mm256_set1_epi16(1));
  const __m256 ds = _mm256_setr_ps(d[0], d[4], d[8], d[12], d[16], d[20], d[24], d[28]);
  _mm256_storeu_ps(lane_scale, ds);
  _mm256_storeu_ps(lane_sum, _mm256_mul_ps(ds, _mm256_cvtepi32_ps(lanes)));
}

}  // namespace

void resize_q8_activations(Q8Activations& out, int64_t rows, int64_t cols) {
  OPTIMATE_CHECK(cols > 0 && cols % kQ8Block == 0, "activation rows of {} elements: not whole blocks of {}", cols, kQ8Block);
  out.rows = rows;
  out.cols = cols;
  const int64_t n = out.units() * (rows + kQ8Rows - 1) / kQ8Rows * kQ8Rows;
  grow(out.q, n * kQ8Unit);
  grow(out.lane_scale, n * kQ8Unit / kQ8Lane);
  grow(out.lane_sum, n * kQ8Unit / kQ8Lane);
  if (cols % kQ8Unit != 0) {  // the half unit's padding: zeros the kernels may read
    const int64_t u = out.units() - 1;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t at = out.slot(u, r);
      std::fill_n(out.q.data() + at * kQ8Unit + kQ8Block, kQ8Block, int8_t{0});
      std::fill_n(out.lane_scale.data() + at * 16 + 8, 8, 0.0f);
      std::fill_n(out.lane_sum.data() + at * 16 + 8, 8, 0.0f);
    }
  }
}

void quantize_activations(const float* x, int64_t row0, int64_t row1, Q8Activations& out) {
  const int64_t cols = out.cols;
  for (int64_t r = row0; r < row1; ++r)
    for (int64_t c = 0; c < cols; c += kQ8Block) {
      const int64_t unit = c / kQ8Unit, half = (c % kQ8Unit) / kQ8Block, at = out.slot(unit, r);
      quantize_block(x + r * cols + c, out.q.data() + at * kQ8Unit + half * kQ8Block,
                     out.lane_scale.data() + at * 16 + half * 8, out.lane_sum.data() + at * 16 + half * 8);
    }
}

namespace {
int64_t at(const Q8Activations& a, int64_t row, int64_t col) {
  return a.slot(col / kQ8Unit, row) * kQ8Unit + col % kQ8Unit;
}
}  // namespace

int8_t activation_q(const Q8Activations& a, int64_t row, int64_t col) { return a.q[at(a, row, col)]; }
float activation_scale(const Q8Activations& a, int64_t row, int64_t col) { return a.lane_scale[at(a, row, col) / kQ8Lane]; }
float activation_lane_sum(const Q8Activations& a, int64_t row, int64_t col) { return a.lane_sum[at(a, row, col) / kQ8Lane]; }
float dequantized_activation(const Q8Activations& a, int64_t row, int64_t col) {
  return static_cast<float>(activation_q(a, row, col)) * activation_scale(a, row, col);
}

}  // namespace optimate::cpu
