// AVX-512 VNNI integer kernel (see q8_kernels.h): 64 weights a step, one vpdpbusd (u8 x s8,
// four products summed into each of 16 s32 lanes). Compiled with a function-level target
// attribute: the rest of the backend is built for x86-64-v3, and this code runs only after
// cpu_supports(CpuIsa::kAvx512Vnni) said yes.
#include <immintrin.h>

// GCC 12 reports the deliberately undefined pass-through operands inside its own AVX-512
// intrinsics (_mm512_undefined_*) as maybe-uninitialized; they are never read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "backend/cpu/q8_kernels.h"
#include "core/error.h"

#define OPTIMATE_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

namespace optimate::cpu {
namespace {

constexpr int kMaxTokens = 8;

// Four group values (scales or offsets of 64 weights), each over its four lanes.
OPTIMATE_AVX512_VNNI inline __m512 group_lanes(const float* g) {
  const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  return _mm512_permutexvar_ps(idx, _mm512_zextps128_ps512(_mm_loadu_ps(g)));
}

template <int M>
OPTIMATE_AVX512_VNNI void row_kernel(const UnpackedRow& w, const Q8Activations& x, int64_t t0,
                                     float* y, int64_t stride, bool accumulate) {
  // Two accumulators per token: the scaled dot products and the offsets' terms, so a single
  // token's chain of dependent FMAs is half as long.
  __m512 acc[M], off[M];
  for (int t = 0; t < M; ++t) acc[t] = off[t] = _mm512_setzero_ps();
  const int64_t units = x.units();
  for (int64_t u = 0; u < units; ++u) {
    // A half unit at the end reads zero padding on both sides.
    const __m512i wv = _mm512_loadu_si512(w.q.data() + u * kQ8Unit);
    const __m512 sl = group_lanes(w.scale.data() + 4 * u);
    const __m512 ol = group_lanes(w.offset.data() + 4 * u);
    const int8_t* xq = x.q_unit(u, t0);
    const float* xs = x.scale_unit(u, t0);
    const float* xl = x.sum_unit(u, t0);
    for (int t = 0; t < M; ++t) {
      const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, _mm512_loadu_si512(xq + kQ8Unit * t));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(sl, _mm512_loadu_ps(xs + 16 * t)), acc[t]);
      off[t] = _mm512_fmadd_ps(ol, _mm512_loadu_ps(xl + 16 * t), off[t]);
    }
  }
  for (int t = 0; t < M; ++t) {
    const float v = _mm512_reduce_add_ps(_mm512_add_ps(acc[t], off[t]));
    float& out = y[t * stride];
    out = accumulate ? out + v : v;  // never reads y unless asked: it may hold NaN
  }
}

}  // namespace

OPTIMATE_AVX512_VNNI void q8_row_avx512_vnni(const UnpackedRow& w, const Q8Activations& x, int64_t t0,
                                             int64_t num_tokens, float* y, int64_t out_stride,
                                             bool accumulate) {
  OPTIMATE_CHECK(!w.is_signed, "the VNNI kernel takes Q8_0 unpacked as q + 128");
  switch (num_tokens) {
    case 1: return row_kernel<1>(w, x, t0, y, out_stride, accumulate);
    case 2: return row_kernel<2>(w, x, t0, y, out_stride, accumulate);
    case 3: return row_kernel<3>(w, x, t0, y, out_stride, accumulate);
    case 4: return row_kernel<4>(w, x, t0, y, out_stride, accumulate);
    case 5: return row_kernel<5>(w, x, t0, y, out_stride, accumulate);
    case 6: return row_kernel<6>(w, x, t0, y, out_stride, accumulate);
    case 7: return row_kernel<7>(w, x, t0, y, out_stride, accumulate);
    case 8: return row_kernel<8>(w, x, t0, y, out_stride, accumulate);
    default: break;
  }
  OPTIMATE_CHECK(false, "the VNNI kernel takes 1 to {} tokens, got {}", kMaxTokens, num_tokens);
}

}  // namespace optimate::cpu
