// e4m3 codes to fp16 in kernels: the cvt instruction of compute capability 8.9 and later; below
// it a few integer operations and one exact multiply, so the sm_80 build compiles the kernels
// that read FP8 (cuda_fp8.h's own emulation, a loop per subnormal code, made the unrolled GEMV
// take ten times as long to compile for sm_80 as for sm_90). The runner never runs those
// kernels on such a GPU: FP8 weights and fp8 KV are refused at start there (kernel_paths.h).
#pragma once

#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace optimate::cuda {

// One code's fp16 bits without the instruction, exactly as cvt.rn.f16x2.e4m3x2 gives them: e4m3's
// exponent bias is 7 and fp16's 15, so the code's magnitude bits moved into fp16's fields are
// the value times 2^-8, subnormals included, and a multiply by 256 is exact; NaN (0x7f, 0xff)
// becomes fp16's canonical NaN.
__host__ __device__ __forceinline__ uint16_t e4m3_to_half_bits_emulated(uint32_t code) {
  const __half scaled = __hmul(__ushort_as_half(static_cast<unsigned short>((code & 0x7fu) << 7)),
                               __ushort_as_half(static_cast<unsigned short>(0x5c00u)));  // 256
  const uint16_t bits = static_cast<uint16_t>(__half_as_ushort(scaled) | ((code & 0x80u) << 8));
  return (code & 0x7fu) == 0x7fu ? static_cast<uint16_t>(0x7fffu) : bits;
}

// Two codes (the first in the low byte) as an fp16 pair's bits (the first in the low half).
// Every e4m3 value is an fp16 value, so this is exact.
__device__ __forceinline__ uint32_t e4m3x2_to_half2_bits(uint16_t pair) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
#else
  return static_cast<uint32_t>(e4m3_to_half_bits_emulated(pair & 0xffu)) |
         (static_cast<uint32_t>(e4m3_to_half_bits_emulated(pair >> 8)) << 16);
#endif
}

// Four codes of a word as two fp16 pairs' bits (codes 0, 1 in lo; 2, 3 in hi). From 8.9 the
// cvt reads the word's halves in place, with no shift for the high one.
__device__ __forceinline__ void e4m3x4_to_half2x2_bits(uint32_t word, uint32_t& lo, uint32_t& hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\ncvt.rn.f16x2.e4m3x2 %1, h;\n}"
      : "=r"(lo), "=r"(hi)
      : "r"(word));
#else
  lo = e4m3x2_to_half2_bits(static_cast<uint16_t>(word));
  hi = e4m3x2_to_half2_bits(static_cast<uint16_t>(word >> 16));
#endif
}

}  // namespace optimate::cuda
