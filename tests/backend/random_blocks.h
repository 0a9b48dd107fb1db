// Random GGUF quantization blocks (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K) with valid fp16 scales,
// for tests of the kernels and runners that read weights as stored.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/host_tensor.h"

namespace optimate::testing {

// A random normal fp16 with exponent field in [lo, hi] (2^(lo-15) .. 2^(hi-14) in magnitude).
inline uint16_t random_half(std::mt19937& rng, int lo, int hi, bool allow_negative) {
  const uint16_t sign = allow_negative && (rng() & 1) ? 0x8000 : 0;
  const uint16_t exponent = static_cast<uint16_t>(lo + rng() % (hi - lo + 1));
  return static_cast<uint16_t>(sign | exponent << 10 | (rng() & 0x3ff));
}

// `num_elems` elements (a multiple of the type's block) of random blocks: random quants and
// sub-block scales, fp16 scales (and Q4_1 offsets, K-quant minimum scales) with exponent fields
// in [lo, hi] (the default: 2^-10 .. 2^-2). K-quant super-block scales are taken 16 times
// smaller, since their 6- and 8-bit sub-block scales multiply them.
inline std::vector<uint8_t> random_blocks(DType dtype, int64_t num_elems, uint32_t seed, int lo = 5,
                                          int hi = 12) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> data(dtype_row_bytes(dtype, static_cast<size_t>(num_elems)));
  const size_t block = dtype_block_bytes(dtype);
  for (size_t b = 0; b < data.size(); b += block) {
    uint8_t* p = data.data() + b;
    for (size_t i = 0; i < block; ++i) p[i] = static_cast<uint8_t>(rng());
    const bool k_quant = dtype == DType::kQ4_K || dtype == DType::kQ5_K || dtype == DType::kQ6_K;
    const int klo = k_quant ? std::max(1, lo - 4) : lo, khi = k_quant ? std::max(klo, hi - 4) : hi;
    const uint16_t d = random_half(rng, klo, khi, true);
    std::memcpy(p + (dtype == DType::kQ6_K ? 208 : 0), &d, 2);
    if (dtype == DType::kQ4_1 || dtype == DType::kQ4_K || dtype == DType::kQ5_K) {
      const uint16_t m = random_half(rng, klo, khi, true);
      std::memcpy(p + 2, &m, 2);
    }
  }
  return data;
}

// A tensor of random blocks that owns its bytes.
inline HostTensor random_block_tensor(std::string name, DType dtype, std::vector<int64_t> shape,
                                      uint32_t seed, int lo = 5, int hi = 12) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  auto bytes = std::make_shared<std::vector<uint8_t>>(random_blocks(dtype, n, seed, lo, hi));
  HostTensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = std::span<const uint8_t>(bytes->data(), bytes->size());
  t.owner = bytes;
  return t;
}

}  // namespace optimate::testing
