// The rotation of one rotary pair, shared by the kernels that rotate q and k (rope.cu,
// rope_kv_write.cu) so they produce the same bits.
#pragma once

#include <cuda_runtime.h>

namespace optimate::cuda {

// (x0, x1) turned by the angle of cosine c and sine s: (x0 c - x1 s, x1 c + x0 s), each written
// as one rounded product and one fused multiply-add, so no kernel leaves the choice of which
// product to fuse to the compiler.
__device__ __forceinline__ float2 rope_pair(float x0, float x1, float c, float s) {
  return make_float2(__fmaf_rn(x0, c, -__fmul_rn(x1, s)), __fmaf_rn(x1, c, __fmul_rn(x0, s)));
}

}  // namespace optimate::cuda
