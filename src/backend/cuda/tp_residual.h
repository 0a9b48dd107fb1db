// The element-wise ops around a tensor-parallel rank's all-reduce (backend/cuda/forward_pass.cpp):
// a row-parallel projection (o, down) writes its partial product in fp32, the ranks sum it, and
// the sum joins the residual stream rounded to bf16 exactly as one GPU's projection output is.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace optimate::cuda {

// residual[i] += bf16(sum[i]) for i < count (what GemvEpilogue::kAddResidual adds).
// sum, residual: [count] fp32.
void add_rounded_to_residual(const float* sum, float* residual, int64_t count, cudaStream_t stream);

// out[i] = bf16(in[i]) for i < count (what a projection with a bf16 output stores).
void round_to_bf16(const float* in, __nv_bfloat16* out, int64_t count, cudaStream_t stream);

}  // namespace optimate::cuda
