// fp16 / bf16 <-> fp32 conversions on the host (exact, round-to-nearest-even on the way down).
#pragma once

#include <cstdint>
#include <cstring>

namespace optimate {

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;              // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;             // overflow -> inf
  if (abs < 0x33000001u) return sign;                        // underflow -> 0
  int exp = static_cast<int>(abs >> 23) - 127 + 15;
  uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  if (exp <= 0) {  // subnormal result
    const int shift = 14 - exp;
    uint32_t rounded = (mant + (1u << (shift - 1)) - 1 + ((mant >> shift) & 1u)) >> shift;
    return sign | static_cast<uint16_t>(rounded);
  }
  uint32_t rounded = (mant + 0xfffu + ((mant >> 13) & 1u)) >> 13;
  if (rounded & 0x800u) {  // mantissa overflow into the exponent
    rounded >>= 1;
    ++exp;
  }
  if (exp >= 31) return sign | 0x7c00u;
  return sign | static_cast<uint16_t>((exp << 10) | (rounded & 0x3ffu));
}

}  // namespace optimate
