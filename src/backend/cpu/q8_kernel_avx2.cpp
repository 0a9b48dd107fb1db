// AVX2 integer kernel (see q8_kernels.h): 32 weights a step, vpmaddubsw (u8 x s8 -> pairs of
// s16) then vpmaddwd by ones (-> eight s32 lanes of four products). The backend is compiled for
// x86-64-v3, so this variant needs no target attribute.
#include <immintrin.h>

#include "backend/cpu/q8_kernels.h"
#include "backend/cpu/simd.h"
#include "core/error.h"

namespace optimate::cpu {
namespace {

constexpr int kMaxTokens = 4;  // 2 accumulators per output in 16 ymm registers

struct Half {
  __m256i values;  // u8; for a biased matrix, |q| with the sign moved onto the activation
  __m256i sign;    // biased matrices: q (s8), whose signs multiply the activation
  __m256 scale;
  __m256 offset;
};

// Half h (weights 32h .. 32h + 31) of the unit at p.
template <bool kFour, bool kGroup16, bool kBiased, bool kHalf>
inline Half load_half(const uint8_t* p, int h) {
  Half out;
  const __m256i mask = _mm256_set1_epi8(0x0F);
  if constexpr (kFour) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    out.values = h == 0 ? _mm256_and_si256(raw, mask) : _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
  } else {
    out.values = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * h));
  }
  if constexpr (kBiased) {
    out.sign = _mm256_xor_si256(out.values, _mm256_set1_epi8(static_cast<char>(0x80)));  // q
    out.values = _mm256_sign_epi8(out.sign, out.sign);                                     // |q|
  }
  const uint8_t* sp = p + (kFour ? 32 : 64);
  if constexpr (kHalf) {  // fp16 s0 s1 o0 o1 (group 32)
    static_assert(!kGroup16);
    const __m256 v = _mm256_castps128_ps256(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sp))));
    out.scale = _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(h));
    out.offset = _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(2 + h));
    return out;
  }
  const float* so = reinterpret_cast<const float*>(sp);
  if constexpr (kGroup16) {  // s0 s1 s2 s3 o0 o1 o2 o3
    const __m256i idx = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256 v = _mm256_loadu_ps(so);
    out.scale = _mm256_permutevar8x32_ps(v, _mm256_add_epi32(idx, _mm256_set1_epi32(2 * h)));
    out.offset = _mm256_permutevar8x32_ps(v, _mm256_add_epi32(idx, _mm256_set1_epi32(4 + 2 * h)));
  } else {  // s0 s1 o0 o1
    out.scale = _mm256_broadcast_ss(so + h);
    out.offset = _mm256_broadcast_ss(so + 2 + h);
  }
  return out;
}

template <bool kFour, bool kGroup16, bool kBiased, bool kHalf, int R, int M>
void tile(const Q8Matrix& w, int64_t r0, const Q8Activations& x, int64_t t0, float* y, int64_t stride,
          bool accumulate) {
  __m256 acc[R][M], off[R][M];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < M; ++t) acc[i][t] = off[i][t] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t u = 0; u < w.units; ++u)
    for (int h = 0; h < 2; ++h) {
      const int8_t* xq = x.q_unit(u, t0) + 32 * h;
      const float* xs = x.scale_unit(u, t0) + 8 * h;
      const float* xl = x.sum_unit(u, t0) + 8 * h;
      for (int i = 0; i < R; ++i) {
        if constexpr (M <= kQ8PrefetchTokens)
          if (h == 0) q8_prefetch(w.row(r0 + i) + u * w.unit_bytes);
        const Half wh = load_half<kFour, kGroup16, kBiased, kHalf>(w.row(r0 + i) + u * w.unit_bytes, h);
        for (int t = 0; t < M; ++t) {
          __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + kQ8Unit * t));
          if constexpr (kBiased) xv = _mm256_sign_epi8(xv, wh.sign);
          const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(wh.values, xv), ones);
          acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(wh.scale, _mm256_loadu_ps(xs + 16 * t)),
                                      acc[i][t]);
          // A biased matrix's offsets only undo its bias, which the sign trick never added.
          if constexpr (!kBiased) off[i][t] = _mm256_fmadd_ps(wh.offset, _mm256_loadu_ps(xl + 16 * t), off[i][t]);
        }
      }
    }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < M; ++t) {
      const float v = hsum(_mm256_add_ps(acc[i][t], off[i][t]));
      float& out = y[t * stride + r0 + i];
      out = accumulate ? out + v : v;  // never reads y unless asked: it may hold NaN
    }
}

template <bool kFour, bool kGroup16, bool kBiased, bool kHalf, int R, int M>
void rows_for(const Q8Matrix& w, int64_t row0, int64_t rows, const Q8Activations& x, int64_t t0, float* y,
              int64_t stride, bool accumulate) {
  int64_t r = row0;
  for (; r + R <= row0 + rows; r += R) tile<kFour, kGroup16, kBiased, kHalf, R, M>(w, r, x, t0, y, stride, accumulate);
  for (; r < row0 + rows; ++r) tile<kFour, kGroup16, kBiased, kHalf, 1, M>(w, r, x, t0, y, stride, accumulate);
}

template <bool kFour, bool kGroup16, bool kBiased, bool kHalf>
void dispatch(const Q8Matrix& w, int64_t row0, int64_t rows, const Q8Activations& x, int64_t t0, int64_t m,
              float* y, int64_t stride, bool accumulate) {
  switch (m) {
    case 1: return rows_for<kFour, kGroup16, kBiased, kHalf, 4, 1>(w, row0, rows, x, t0, y, stride, accumulate);
    case 2: return rows_for<kFour, kGroup16, kBiased, kHalf, 2, 2>(w, row0, rows, x, t0, y, stride, accumulate);
    case 3: return rows_for<kFour, kGroup16, kBiased, kHalf, 1, 3>(w, row0, rows, x, t0, y, stride, accumulate);
    case 4: return rows_for<kFour, kGroup16, kBiased, kHalf, 1, 4>(w, row0, rows, x, t0, y, stride, accumulate);
    default: break;
  }
  OPTIMATE_CHECK(false, "the AVX2 kernel takes 1 to {} tokens, got {}", kMaxTokens, m);
}

}  // namespace

void q8_rows_avx2(const Q8Matrix& w, int64_t row0, int64_t rows, const Q8Activations& x, int64_t t0,
                  int64_t num_tokens, float* y, int64_t out_stride, bool accumulate) {
  // The layouts pack_q8_matrix makes: Q8_0 (biased, fp16), Q4_0/Q4_1 (4-bit, fp16), Q4_K (4-bit),
  // Q5_K (8-bit), Q6_K (8-bit, groups of 16).
  OPTIMATE_CHECK(!w.half_scales || w.group == 32, "fp16 scales come in groups of 32");
  OPTIMATE_CHECK(!w.biased || (w.half_scales && !w.four_bit), "biased values are Q8_0's");
  OPTIMATE_CHECK(w.group == 32 || !w.four_bit, "4-bit values come in groups of 32");
  if (w.biased) return dispatch<false, false, true, true>(w, row0, rows, x, t0, num_tokens, y, out_stride, accumulate);
  if (w.half_scales) return dispatch<true, false, false, true>(w, row0, rows, x, t0, num_tokens, y, out_stride, accumulate);
  if (w.four_bit) return dispatch<true, false, false, false>(w, row0, rows, x, t0, num_tokens, y, out_stride, accumulate);
  if (w.group == 32) return dispatch<false, false, false, false>(w, row0, rows, x, t0, num_tokens, y, out_stride, accumulate);
  return dispatch<false, true, false, false>(w, row0, rows, x, t0, num_tokens, y, out_stride, accumulate);
}

Q8Kernel q8_kernel(CpuIsa isa) { return isa == CpuIsa::kAvx512Vnni ? q8_rows_avx512_vnni : q8_rows_avx2; }

int64_t q8_max_tokens(CpuIsa isa) { return isa == CpuIsa::kAvx512Vnni ? 8 : kMaxTokens; }

}  // namespace optimate::cpu
