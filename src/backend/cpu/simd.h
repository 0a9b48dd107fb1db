// AVX2 helpers shared by the CPU linear kernels.
#pragma once

#include <immintrin.h>

namespace optimate::cpu {

// The sum of a vector's eight floats.
inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

}  // namespace optimate::cpu
