// AVX2 integer kernel (see q8_kernels.h): 32 weights a step, vpmaddubsw (u8 x s8 -> pairs of
// s16) then vpmaddwd by ones (-> eight s32 lanes of four products). The backend is compiled for
// x86-64-v3, so this variant needs no target attribute.
#include <immintrin.h>

#include "backend/cpu/q8_kernels.h"
#include "backend/cpu/simd.h"
#include "core/error.h"

namespace optimate::cpu {
namespace {

constexpr int kMaxTokens = 4;  // 2 accumulators per token in 16 ymm registers

inline __m256 group_lanes(const float* g) {  // two group values, each over four lanes
  const __m128 two = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(g)));
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(two), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

template <int M, bool kSigned>
void row_kernel(const UnpackedRow& w, const Q8Activations& x, int64_t t0, float* y, int64_t stride,
                bool accumulate) {
  __m256 acc[M], off[M];
  for (int t = 0; t < M; ++t) acc[t] = off[t] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t halves = w.cols / 32;
  for (int64_t h = 0; h < halves; ++h) {  // half units of 32 columns
    const int64_t u = h / 2, part = h % 2;
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.q.data() + 32 * h));
    const __m256i aw = kSigned ? _mm256_sign_epi8(wv, wv) : wv;
    const __m256 sl = group_lanes(w.scale.data() + 2 * h);
    const __m256 ol = kSigned ? _mm256_setzero_ps() : group_lanes(w.offset.data() + 2 * h);
    const int8_t* xq = x.q_unit(u, t0) + 32 * part;
    const float* xs = x.scale_unit(u, t0) + 8 * part;
    const float* xl = x.sum_unit(u, t0) + 8 * part;
    for (int t = 0; t < M; ++t) {
      __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + kQ8Unit * t));
      if constexpr (kSigned) xv = _mm256_sign_epi8(xv, wv);
      const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, xv), ones);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(sl, _mm256_loadu_ps(xs + 16 * t)), acc[t]);
      if constexpr (!kSigned) off[t] = _mm256_fmadd_ps(ol, _mm256_loadu_ps(xl + 16 * t), off[t]);
    }
  }
  for (int t = 0; t < M; ++t) {
    const float v = hsum(_mm256_add_ps(acc[t], off[t]));
    float& out = y[t * stride];
    out = accumulate ? out + v : v;  // never reads y unless asked: it may hold NaN
  }
}

template <bool kSigned>
void dispatch(const UnpackedRow& w, const Q8Activations& x, int64_t t0, int64_t m, float* y,
              int64_t stride, bool accumulate) {
  switch (m) {
    case 1: return row_kernel<1, kSigned>(w, x, t0, y, stride, accumulate);
    case 2: return row_kernel<2, kSigned>(w, x, t0, y, stride, accumulate);
    case 3: return row_kernel<3, kSigned>(w, x, t0, y, stride, accumulate);
    case 4: return row_kernel<4, kSigned>(w, x, t0, y, stride, accumulate);
    default: break;
  }
  OPTIMATE_CHECK(false, "the AVX2 kernel takes 1 to {} tokens, got {}", kMaxTokens, m);
}

}  // namespace

void q8_row_avx2(const UnpackedRow& w, const Q8Activations& x, int64_t t0, int64_t num_tokens,
                 float* y, int64_t out_stride, bool accumulate) {
  if (w.is_signed) dispatch<true>(w, x, t0, num_tokens, y, out_stride, accumulate);
  else dispatch<false>(w, x, t0, num_tokens, y, out_stride, accumulate);
}

Q8RowKernel q8_row_kernel(CpuIsa isa) {
  return isa == CpuIsa::kAvx512Vnni ? q8_row_avx512_vnni : q8_row_avx2;
}

int64_t q8_max_tokens(CpuIsa isa) { return isa == CpuIsa::kAvx512Vnni ? 8 : kMaxTokens; }

bool q8_signed_weights(CpuIsa isa) { return isa == CpuIsa::kAvx2; }

}  // namespace optimate::cpu
