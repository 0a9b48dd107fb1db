// AVX-512 VNNI integer kernel (see q8_kernels.h): 64 weights a step, one vpdpbusd (u8 x s8,
// four products summed into each of 16 s32 lanes). Compiled with a function-level target
// attribute: the rest of the backend is built for x86-64-v3, and this code runs only after
// cpu_supports(CpuIsa::kAvx512Vnni) said yes.
#include <immintrin.h>

// GCC 12 reports the deliberately undefined pass-through operands inside its own AVX-512
// intrinsics (_mm512_undefined_*) as uninitialized or maybe so; they are never read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "backend/cpu/q8_kernels.h"
#include "core/error.h"

#define OPTIMATE_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

namespace optimate::cpu {
namespace {

constexpr int kMaxTokens = 8;

struct Unit {
  __m512i values;
  __m512 scale;   // per lane
  __m512 offset;  // per lane
};

// One unit of 64 weights: values widened to bytes, scales and offsets spread over the lanes of
// their group (four lanes per 16 weights).
template <bool kFour, bool kGroup16, bool kHalf>
OPTIMATE_AVX512_VNNI inline Unit load_unit(const uint8_t* p) {
  Unit u;
  if constexpr (kFour) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i mask = _mm256_set1_epi8(0x0F);
    u.values = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(raw, mask)),
                                  _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask), 1);
  } else {
    u.values = _mm512_loadu_si512(p);
  }
  const uint8_t* so = p + (kFour ? 32 : 64);
  if constexpr (kHalf) {  // fp16 s0 s1 o0 o1 (group 32)
    static_assert(!kGroup16);
    const __m512 v = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(so))));
    u.scale = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), v);
    u.offset = _mm512_permutexvar_ps(_mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3), v);
  } else if constexpr (kGroup16) {  // s0 s1 s2 s3 o0 o1 o2 o3
    const __m512 v = _mm512_castps256_ps512(_mm256_loadu_ps(reinterpret_cast<const float*>(so)));
    u.scale = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), v);
    u.offset = _mm512_permutexvar_ps(_mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7), v);
  } else {  // s0 s1 o0 o1
    const __m512 v = _mm512_castps128_ps512(_mm_loadu_ps(reinterpret_cast<const float*>(so)));
    u.scale = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), v);
    u.offset = _mm512_permutexvar_ps(_mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3), v);
  }
  return u;
}

// R rows x M tokens; two accumulators per output (the scaled dot products and the offsets'
// terms) keep the dependent FMA chains short when R * M is small.
template <bool kFour, bool kGroup16, bool kHalf, int R, int M>
OPTIMATE_AVX512_VNNI void tile(const Q8Matrix& w, int64_t r0, const Q8Activations& x, int64_t t0, float* y,
                               int64_t stride, bool accumulate) {
  __m512 acc[R][M], off[R][M];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < M; ++t) acc[i][t] = off[i][t] = _mm512_setzero_ps();
  const uint8_t* row[R];
  for (int i = 0; i < R; ++i) row[i] = w.row(r0 + i);
  for (int64_t u = 0; u < w.units; ++u) {
    const int8_t* xq = x.q_unit(u, t0);
    const float* xs = x.scale_unit(u, t0);
    const float* xl = x.sum_unit(u, t0);
    for (int i = 0; i < R; ++i) {
      if constexpr (M <= kQ8PrefetchTokens) q8_prefetch(row[i] + u * w.unit_bytes);
      const Unit wu = load_unit<kFour, kGroup16, kHalf>(row[i] + u * w.unit_bytes);
      for (int t = 0; t < M; ++t) {
        const __m512i dot =
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), wu.values, _mm512_loadu_si512(xq + kQ8Unit * t));
        acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(wu.scale, _mm512_loadu_ps(xs + 16 * t)),
                                    acc[i][t]);
        off[i][t] = _mm512_fmadd_ps(wu.offset, _mm512_loadu_ps(xl + 16 * t), off[i][t]);
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < M; ++t) {
      const float v = _mm512_reduce_add_ps(_mm512_add_ps(acc[i][t], off[i][t]));
      float& out = y[t * stride + r0 + i];
      out = accumulate ? out + v : v;  // never reads y unless asked: it may hold NaN
    }
}

// Rows in tiles of R (then single rows), for a group of M tokens.
template <bool kFour, bool kGroup16, bool kHalf, int R, int M>
OPTIMATE_AVX512_VNNI void rows_for(const Q8Matrix& w, int64_t row0, int64_t rows, const Q8Activations& x,
                                   int64_t t0, float* y, int64_t stride, bool accumulate) {
  int64_t r = row0;
  for (; r + R <= row0 + rows; r += R) tile<kFour, kGroup16, kHalf, R, M>(w, r, x, t0, y, stride, accumulate);
  for (; r < row0 + rows; ++r) tile<kFour, kGroup16, kHalf, 1, M>(w, r, x, t0, y, stride, accumulate);
}

template <bool kFour, bool kGroup16, bool kHalf>
OPTIMATE_AVX512_VNNI void dispatch(const Q8Matrix& w, int64_t row0, int64_t rows, const Q8Activations& x,
                                   int64_t t0, int64_t m, float* y, int64_t stride, bool accumulate) {
  switch (m) {  // at most 16 accumulator pairs' worth of registers
    case 1: return rows_for<kFour, kGroup16, kHalf, 4, 1>(w, row0, rows, x, t0, y, stride, accumulate);
    case 2: return rows_for<kFour, kGroup16, kHalf, 4, 2>(w, row0, rows, x, t0, y, stride, accumulate);
    case 3: return rows_for<kFour, kGroup16, kHalf, 2, 3>(w, row0, rows, x, t0, y, stride, accumulate);
    case 4: return rows_for<kFour, kGroup16, kHalf, 2, 4>(w, row0, rows, x, t0, y, stride, accumulate);
    case 5: return rows_for<kFour, kGroup16, kHalf, 1, 5>(w, row0, rows, x, t0, y, stride, accumulate);
    case 6: return rows_for<kFour, kGroup16, kHalf, 1, 6>(w, row0, rows, x, t0, y, stride, accumulate);
    case 7: return rows_for<kFour, kGroup16, kHalf, 1, 7>(w, row0, rows, x, t0, y, stride, accumulate);
    case 8: return rows_for<kFour, kGroup16, kHalf, 1, 8>(w, row0, rows, x, t0, y, stride, accumulate);
    default: break;
  }
  OPTIMATE_CHECK(false, "the VNNI kernel takes 1 to {} tokens, got {}", kMaxTokens, m);
}

}  // namespace

OPTIMATE_AVX512_VNNI void q8_rows_avx512_vnni(const Q8Matrix& w, int64_t row0, int64_t rows,
                                              const Q8Activations& x, int64_t t0, int64_t num_tokens, float* y,
                                              int64_t out_stride, bool accumulate) {
  // The layouts pack_q8_matrix makes: fp16 scales for the 32-weight types, fp32 for K-quants.
  OPTIMATE_CHECK(!w.half_scales || w.group == 32, "fp16 scales come in groups of 32");
  OPTIMATE_CHECK(w.group == 32 || !w.four_bit, "4-bit values come in groups of 32");
  if (w.half_scales)
    return w.four_bit ? dispatch<true, false, true>(w, row0, rows, x, t0, num_tokens, y, out_stride, accumulate)
                      : dispatch<false, false, true>(w, row0, rows, x, t0, num_tokens, y, out_stride, accumulate);
  if (w.four_bit) return dispatch<true, false, false>(w, row0, rows, x, t0, num_tokens, y, out_stride, accumulate);
  if (w.group == 32) return dispatch<false, false, false>(w, row0, rows, x, t0, num_tokens, y, out_stride, accumulate);
  return dispatch<false, true, false>(w, row0, rows, x, t0, num_tokens, y, out_stride, accumulate);
}

}  // namespace optimate::cpu
