// Quantizing a KV row on the device and reading codes back: the GPU side of kv/kv_format.h's
// store_row / load_row, with the same arithmetic (IEEE fp32 division, round half to even, fp16
// scale and min for int4, e4m3 saturating to +-448) so codes and scales match the CPU twin bit
// for bit and the values read back equal load_row's.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/e4m3.cuh"
#include "backend/cuda/kv_block.h"

namespace optimate::cuda {

// ---- reading: eight consecutive elements of a row ----
//
// Kernels carry eight elements as one uint4 whatever the precision, so a block's precision
// changes no register layout: bf16, the 16 bytes; fp8 and int8, the 8 codes in x, y and the
// row's float scale in z; int4, the 8 codes in x (element 2i in the low nibble of byte i) and
// their group's fp16 scale (low half) and min (high half) in y.

// The codes of elements [8 piece, 8 piece + 8) of a row whose codes start at `row` and scales
// at `scales`, packed as above.
__device__ __forceinline__ uint4 kv_load8(int code, const uint8_t* row, const uint8_t* scales, int piece) {
  if (code == kKvBf16) return *reinterpret_cast<const uint4*>(row + 16 * piece);
  if (code == kKvInt4)
    return make_uint4(*reinterpret_cast<const uint32_t*>(row + 4 * piece),
                      *reinterpret_cast<const uint32_t*>(scales + 4 * (piece / 8)), 0u, 0u);
  const uint2 v = *reinterpret_cast<const uint2*>(row + 8 * piece);
  return make_uint4(v.x, v.y, *reinterpret_cast<const uint32_t*>(scales), 0u);
}

// Signed byte i of w, exactly: 2^23 + (byte ^ 0x80) as a float's bits, less 2^23 + 128.
__device__ __forceinline__ float kv_int8_at(uint32_t w_xor80, int i) {
  return __uint_as_float(__byte_perm(w_xor80, 0x4B000000u, 0x7650u + i)) - 8388736.0f;
}

// The eight values, exactly as kv::load_row computes them.
__device__ __forceinline__ void kv_dequant8(int code, const uint4& e, float (&x)[8]) {
  if (code == kKvBf16) {
    unpack_bf16x8(*reinterpret_cast<const Bf16x8*>(&e), x);
  } else if (code == kKvInt8) {
    const float s = __uint_as_float(e.z);
    const uint32_t lo = e.x ^ 0x80808080u, hi = e.y ^ 0x80808080u;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[i] = kv_int8_at(lo, i) * s;
      x[4 + i] = kv_int8_at(hi, i) * s;
    }
  } else if (code == kKvFp8) {
    const float s = __uint_as_float(e.z);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = i < 2 ? e.x : e.y;
      const uint16_t pair = static_cast<uint16_t>(w >> (16 * (i % 2)));
      const uint32_t h2 = e4m3x2_to_half2_bits(pair);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2));
      x[2 * i] = f.x * s;
      x[2 * i + 1] = f.y * s;
    }
  } else {
    const float s = __half2float(__ushort_as_half(static_cast<unsigned short>(e.y & 0xffffu)));
    const float mn = __half2float(__ushort_as_half(static_cast<unsigned short>(e.y >> 16)));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float q = __uint_as_float(0x4B000000u | ((e.x >> (4 * i)) & 0xfu)) - 8388608.0f;
      x[i] = fmaf(q, s, mn);
    }
  }
}

// The same eight values as bf16 (the tensor-core kernels' operands).
__device__ __forceinline__ uint4 kv_dequant8_bf16(int code, const uint4& e) {
  if (code == kKvBf16) return e;
  float x[8];
  kv_dequant8(code, e, x);
  return make_uint4(pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]), pack_bf16(x[4], x[5]), pack_bf16(x[6], x[7]));
}

// ---- reading as fp16 pairs: codes straight into fp16 mma operands ----
//
// fp8 and int8 codes are fp16 values exactly (e4m3 has fewer bits; integers up to 127 need 7),
// so a kernel may take products with the raw codes and apply each row's scale to the result.
// Both helpers turn bytes i of two words a and b into one pair: r[i] = (a_i low, b_i high).
// Over the two words of one row's 8 codes (a = elements 0..3, b = 4..7) the pairs are
// (e_i, e_{i + 4}); over one word of each of two rows, element i of both rows.
template <int CODE>
__device__ __forceinline__ void kv_codes_to_half2x4(uint32_t a, uint32_t b, uint32_t (&r)[4]) {
  static_assert(CODE == kKvFp8 || CODE == kKvInt8, "fp8 or int8 codes");
  const uint32_t lo = __byte_perm(a, b, 0x5140u);  // a0 b0 a1 b1
  const uint32_t hi = __byte_perm(a, b, 0x7362u);  // a2 b2 a3 b3
  if constexpr (CODE == kKvInt8) {
    // 0x64XX is fp16 1024 + XX, and a signed byte with its top bit flipped is the code + 128.
    const __half2 bias = __half2half2(__ushort_as_half(0x6480));  // 1152
    const uint32_t w[2] = {lo ^ 0x80808080u, hi ^ 0x80808080u};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t x = __byte_perm(w[i / 2], 0x64646464u, i % 2 ? 0x5342u : 0x5140u);
      const __half2 v = __hsub2(*reinterpret_cast<const __half2*>(&x), bias);
      r[i] = *reinterpret_cast<const uint32_t*>(&v);
    }
  } else {
    e4m3x4_to_half2x2_bits(lo, r[0], r[1]);
    e4m3x4_to_half2x2_bits(hi, r[2], r[3]);
  }
}

// int4 nibbles i and i + 4 of t's halves as the fp16 pair (nibble i of the low half) * s2 + mn2
// for i = 0..3, rounded once: t holds one row's 8 codes (pairs (e_i, e_{i + 4}), s2 and mn2 that
// row's scale and min twice), or 4 codes of each of two rows (__byte_perm(a, b, 0x5410): pairs
// of element i of both rows, with each row's scale and min).
__device__ __forceinline__ void kv_int4_to_half2x4(uint32_t t, uint32_t s2, uint32_t mn2, uint32_t (&r)[4]) {
  const __half2 bias = __half2half2(__ushort_as_half(0x6400));  // 1024
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t x = ((t >> (4 * i)) & 0x000f000fu) | 0x64006400u;  // 1024 + code
    const __half2 v = __hfma2(__hsub2(*reinterpret_cast<const __half2*>(&x), bias),
                              *reinterpret_cast<const __half2*>(&s2), *reinterpret_cast<const __half2*>(&mn2));
    r[i] = *reinterpret_cast<const uint32_t*>(&v);
  }
}

// ---- writing: one row, quantized by a whole warp ----
//
// Lane l holds elements [E l, E l + E) of a head_dim = 32 E row. kv_load_row_part: those
// elements of a bf16 row (one 4- or 8-byte load per lane).
template <int E>
__device__ __forceinline__ void kv_load_row_part(const __nv_bfloat16* row, int lane, float (&x)[E]) {
  static_assert(E == 2 || E == 4, "head_dim 64 or 128");
  if constexpr (E == 2) {
    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(row + 2 * lane));
    x[0] = f.x;
    x[1] = f.y;
  } else {
    const uint2 w = *reinterpret_cast<const uint2*>(row + 4 * lane);
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.y));
    x[0] = a.x, x[1] = a.y, x[2] = b.x, x[3] = b.y;
  }
}

// kv_store_row_warp: writes the row's codes at `codes` and its scales at `scales` (kv_block.h
// offsets) as kv::store_row would.
template <int E>
__device__ __forceinline__ void kv_store_row_warp(int code, const float (&x)[E], uint8_t* codes,
                                                  uint8_t* scales, int lane) {
  static_assert(E == 2 || E == 4, "head_dim 64 or 128");
  if (code == kKvBf16) {
    uint32_t w[E / 2];
#pragma unroll
    for (int i = 0; i < E / 2; ++i) w[i] = pack_bf16(x[2 * i], x[2 * i + 1]);
    if constexpr (E == 2) *reinterpret_cast<uint32_t*>(codes + 4 * lane) = w[0];
    else *reinterpret_cast<uint2*>(codes + 8 * lane) = make_uint2(w[0], w[1]);
    return;
  }
  uint32_t packed = 0;
  if (code == kKvFp8 || code == kKvInt8) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < E; ++i) amax = fmaxf(amax, fabsf(x[i]));
    amax = group_max(amax);
    const float scale = __fdiv_rn(amax, code == kKvFp8 ? 448.0f : 127.0f);
#pragma unroll
    for (int i = 0; i < E; ++i) {
      uint32_t q = 0;
      if (scale != 0.0f) {
        const float r = __fdiv_rn(x[i], scale);
        q = code == kKvFp8 ? static_cast<uint32_t>(__nv_cvt_float_to_fp8(r, __NV_SATFINITE, __NV_E4M3))
                           : static_cast<uint32_t>(min(127, max(-127, __float2int_rn(r)))) & 0xffu;
      }
      packed |= q << (8 * i);
    }
    if constexpr (E == 2) *reinterpret_cast<uint16_t*>(codes + 2 * lane) = static_cast<uint16_t>(packed);
    else *reinterpret_cast<uint32_t*>(codes + 4 * lane) = packed;
    if (lane == 0) *reinterpret_cast<float*>(scales) = scale;
    return;
  }
  // int4: groups of 64 elements, (scale, min) in fp16 each; the group's lanes reduce together.
  constexpr int kGroupLanes = 64 / E;
  float lo = x[0], hi = x[0];
#pragma unroll
  for (int i = 1; i < E; ++i) lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
  lo = group_min<kGroupLanes>(lo);
  hi = group_max<kGroupLanes>(hi);
  const __half min_h = __float2half_rn(lo);
  const float mn = __half2float(min_h);
  const __half scale_h = __float2half_rn(__fdiv_rn(__fsub_rn(hi, mn), 15.0f));
  const float scale = __half2float(scale_h);
#pragma unroll
  for (int i = 0; i < E; ++i) {
    const uint32_t q = scale == 0.0f ? 0u
                                     : static_cast<uint32_t>(min(15, max(0, __float2int_rn(__fdiv_rn(__fsub_rn(x[i], mn), scale)))));
    packed |= q << (4 * i);
  }
  if constexpr (E == 2) codes[lane] = static_cast<uint8_t>(packed);
  else *reinterpret_cast<uint16_t*>(codes + 2 * lane) = static_cast<uint16_t>(packed);
  if (lane % kGroupLanes == 0)
    *reinterpret_cast<uint32_t*>(scales + 4 * (lane / kGroupLanes)) =
        static_cast<uint32_t>(__half_as_ushort(scale_h)) | (static_cast<uint32_t>(__half_as_ushort(min_h)) << 16);
}

// Quantizes the row (head, token) of the block at `block` (kv_block.h layout) from the warp's
// values.
template <int E>
__device__ __forceinline__ void kv_store_block_row_warp(int code, const float (&x)[E], uint8_t* block,
                                                        int num_kv_heads, int block_size, int head,
                                                        int token, int lane) {
  constexpr int D = 32 * E;
  kv_store_row_warp<E>(code, x, block + kv_codes_offset(code, block_size, D, head, token),
                       block + kv_scales_offset(code, num_kv_heads, block_size, D, head, token), lane);
}

}  // namespace optimate::cuda
