// The seeded value of element i of dummy tensor `tensor_id`: a counter-based hash
// (splitmix64), so host and device produce the same numbers in any order.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/cuda/weight_layout.h"

#if defined(__CUDACC__)
#define OPTIMATE_HD __host__ __device__ __forceinline__
#else
#define OPTIMATE_HD inline
#endif

namespace optimate::cuda {

OPTIMATE_HD float dummy_uniform(uint64_t seed, uint32_t tensor_id, uint64_t i) {
  uint64_t x = seed ^ (static_cast<uint64_t>(tensor_id) << 40) ^ i;
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) * (1.0f / 16777216.0f);  // [0, 1)
}

// lo + (hi - lo) * u with one rounding (a fused multiply-add on both sides), so the host twin
// and the device agree bit for bit whatever contraction the compilers choose.
OPTIMATE_HD float dummy_value(uint64_t seed, uint32_t tensor_id, uint64_t i, float lo, float hi) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(hi - lo, dummy_uniform(seed, tensor_id, i), lo);
#else
  return std::fma(hi - lo, dummy_uniform(seed, tensor_id, i), lo);
#endif
}

struct DummyRange {
  float lo, hi;
};

inline DummyRange dummy_range(WeightPart part) {
  switch (part) {
    case WeightPart::kFinalNorm:
    case WeightPart::kAttnNorm:
    case WeightPart::kFfnNorm:
    case WeightPart::kQNorm:
    case WeightPart::kKNorm:
      return {0.8f, 1.2f};
    case WeightPart::kBq:
    case WeightPart::kBk:
    case WeightPart::kBv:
      return {-0.1f, 0.1f};
    default:
      return {-0.0346f, 0.0346f};  // std 0.02, Hugging Face's initializer_range
  }
}

}  // namespace optimate::cuda
