// Small device helpers shared by the kernels: warp reductions and 16-byte bf16 vectors.
#pragma once

#include <cuda_bf16.h>
#include <cstdint>

namespace optimate::cuda {

// Sums over `width` consecutive lanes (a power of two <= 32); every lane of the group gets it.
template <int width = 32>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int offset = width / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <int width = 32>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int offset = width / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

template <int width = 32>
__device__ __forceinline__ float group_min(float v) {
#pragma unroll
  for (int offset = width / 2; offset > 0; offset /= 2)
    v = fminf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Eight bf16 values moved as one 16-byte access.
struct alignas(16) Bf16x8 {
  __nv_bfloat162 h[4];
};

// One 16-byte load (src 16-byte aligned). Dereferencing a Bf16x8 pointer directly (or selecting
// one with ?:) lets the compiler split the access into four 4-byte loads, which cost a prefill
// kernel 8x its L1 requests; going through uint4 keeps it one LDG.128 / LDS.128.
__device__ __forceinline__ uint4 load_16_bytes(const __nv_bfloat16* src) {
  return *reinterpret_cast<const uint4*>(src);
}

__device__ __forceinline__ Bf16x8 load_bf16x8_raw(const __nv_bfloat16* src) {
  const uint4 v = load_16_bytes(src);
  return *reinterpret_cast<const Bf16x8*>(&v);
}

// Two floats as the bf16 pair an mma fragment register holds (lo in the low half).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ void unpack_bf16x8(const Bf16x8& v, float (&dst)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(v.h[i]);
    dst[2 * i] = f.x;
    dst[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ void load_bf16x8(const __nv_bfloat16* src, float (&dst)[8]) {
  unpack_bf16x8(load_bf16x8_raw(src), dst);
}

__device__ __forceinline__ void store_bf16x8(__nv_bfloat16* dst, const float (&src)[8]) {
  Bf16x8 v;
#pragma unroll
  for (int i = 0; i < 4; ++i) v.h[i] = __floats2bfloat162_rn(src[2 * i], src[2 * i + 1]);
  *reinterpret_cast<Bf16x8*>(dst) = v;
}

}  // namespace optimate::cuda

namespace optimate::cuda {

// Programmatic dependent launch (see programmatic_launch.h). wait: blocks until the previous
// grid on the stream has completed and flushed its writes (a no-op when this grid was not
// launched as a dependent). launch_dependents: lets the next grid start its prologue.
__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace optimate::cuda
