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

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

// 32 elements in groups of kQ8Scale: int8 values, and per lane of four the group's scale and
// d * (sum of the lane's q).
inline void quantize_block(const float* x, int8_t* q, float* lane_scale, float* lane_sum) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4], inv[4], d[4];
  float amax[4];
  for (int j = 0; j < 4; ++j) {
    v[j] = _mm256_loadu_ps(x + 8 * j);
    amax[j] = hmax(_mm256_andnot_ps(sign, v[j]));
  }
  constexpr int kPer = kQ8Scale / 8;  // vectors of eight per scale
  for (int j = 0; j < 4; j += kPer) {
    float m = amax[j];
    for (int k = 1; k < kPer; ++k) m = std::max(m, amax[j + k]);
    for (int k = 0; k < kPer; ++k) {
      d[j + k] = _mm256_set1_ps(m / 127.0f);
      inv[j + k] = _mm256_set1_ps(m > 0.0f ? 127.0f / m : 0.0f);
    }
  }
  __m256i i[4];
  for (int j = 0; j < 4; ++j) i[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], inv[j]));  // nearest
  // Packing interleaves 128-bit halves; the permute restores element order.
  const __m256i p16a = _mm256_packs_epi32(i[0], i[1]);
  const __m256i p16b = _mm256_packs_epi32(i[2], i[3]);
  const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b),
                                                 _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), p8);
  // Lane sums: each 32-bit lane of p8 holds four consecutive q; lanes 2j, 2j+1 are vector j.
  const __m256i lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), p8), _mm256_set1_epi16(1));
  const __m256 dl = _mm256_setr_m128(_mm_unpacklo_ps(_mm256_castps256_ps128(d[0]), _mm256_castps256_ps128(d[1])),
                                     _mm_unpacklo_ps(_mm256_castps256_ps128(d[2]), _mm256_castps256_ps128(d[3])));
  // dl = d0 d1 d0 d1 | d2 d3 d2 d3; lanes want d0 d0 d1 d1 d2 d2 d3 d3
  const __m256 ds = _mm256_permutevar8x32_ps(dl, _mm256_setr_epi32(0, 0, 1, 1, 4, 4, 5, 5));
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
