// Row kernels: one block per row of bf16 values, each thread holding `chunks` groups of eight
// consecutive elements (16-byte accesses) in registers through the row's reduction, so a row
// is read from memory once (RMSNorm's sum of squares, FP8's absmax). Thread i holds groups
// i, i + threads, i + 2 threads, ... of the row. Also the FP8 rounding those kernels and
// quantize_fp8_rows share (rmsnorm.cu, activation.cu, fp8_quantize.cu).
#pragma once

#include <cstdint>

#include <cuda_fp8.h>

#include "backend/cuda/device_math.cuh"

namespace optimate::cuda {

inline constexpr int kRowMaxThreads = 512;
inline constexpr int kRowMaxChunks = 4;  // 8 would spill registers

// chunks == 0: a row of that width does not fit (cols not a multiple of 8, or wider than
// kRowMaxThreads * kRowMaxChunks * 8 = 16384).
struct RowLaunch {
  int chunks = 0;   // 1, 2 or 4 groups of 8 per thread
  int threads = 0;  // a multiple of 32
};

// The fewest chunks per thread that cover the row with at most kRowMaxThreads threads: rows
// of a few thousand elements take one 16-byte group per thread, so a block keeps 8 KiB of a
// 4096-wide bf16 row in flight and an SM four such blocks.
inline RowLaunch row_launch(int64_t cols) {
  if (cols <= 0 || cols % 8 != 0) return {};
  const int64_t groups = cols / 8;
  for (int chunks = 1; chunks <= kRowMaxChunks; chunks *= 2) {
    const int64_t threads = (groups + chunks - 1) / chunks;
    if (threads <= kRowMaxThreads) return {chunks, static_cast<int>((threads + 31) / 32 * 32)};
  }
  return {};
}

// The sum (kMax false) or maximum over the block's threads; every thread gets it. blockDim.x
// a multiple of 32; scratch: 32 floats of shared memory, reusable by the next call.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* scratch) {
  v = kMax ? group_max(v) : group_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // the previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < static_cast<int>(blockDim.x / 32) ? scratch[lane] : 0.0f;
  return kMax ? group_max(t) : group_sum(t);
}

// Eight floats rounded to bf16 (round to nearest even, as __float2bfloat16), as one 16-byte value.
__device__ __forceinline__ uint4 pack_bf16x8(const float (&v)[8]) {
  return make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]), pack_bf16(v[4], v[5]), pack_bf16(v[6], v[7]));
}

// Eight values to e4m3 codes at `scale` (code = e4m3(v / scale), saturating; all zero when the
// scale is 0), packed in order: model/fp8_quant.h's quantize_fp8_row, bit for bit (IEEE
// division, as the host divides).
__device__ __forceinline__ uint2 fp8_codes8(const float (&v)[8], float scale) {
  uint32_t packed[2] = {0, 0};
  if (scale != 0.0f) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t q = __nv_cvt_float_to_fp8(__fdiv_rn(v[i], scale), __NV_SATFINITE, __NV_E4M3);
      packed[i / 4] |= q << (8 * (i % 4));
    }
  }
  return make_uint2(packed[0], packed[1]);
}

// The tail of a row kernel with an FP8 output: the thread's chunks, already rounded to bf16
// (packed as a bf16 output would hold them, 16 bytes a chunk so a wide row stays in registers),
// quantized with the row's absmax over the whole block: codes written at codes[8 g ...] for each
// of the thread's groups g < groups, the scale at *scale_out. quantize_fp8_rows over the bf16
// row, bit for bit. Every thread of the block must call it.
template <int kChunks>
__device__ __forceinline__ void store_row_fp8(const uint4 (&y)[kChunks], int groups, uint8_t* codes,
                                              float* scale_out, float* scratch) {
  float absmax = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if (static_cast<int>(threadIdx.x + c * blockDim.x) >= groups) continue;
    float v[8];
    unpack_bf16x8(*reinterpret_cast<const Bf16x8*>(&y[c]), v);
#pragma unroll
    for (int i = 0; i < 8; ++i) absmax = fmaxf(absmax, fabsf(v[i]));
  }
  absmax = block_reduce<true>(absmax, scratch);
  const float scale = __fdiv_rn(absmax, 448.0f);
  if (threadIdx.x == 0) *scale_out = scale;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int g = threadIdx.x + c * blockDim.x;
    if (g >= groups) continue;
    float v[8];
    unpack_bf16x8(*reinterpret_cast<const Bf16x8*>(&y[c]), v);
    *reinterpret_cast<uint2*>(codes + 8 * static_cast<int64_t>(g)) = fp8_codes8(v, scale);
  }
}

}  // namespace optimate::cuda
