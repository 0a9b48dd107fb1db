// SiLU-gated linear unit of the Llama MLP.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace optimate::cuda {

// gate_up: [num_tokens, 2 * intermediate] bf16, the fused gate/up GEMM output (gate columns
// first); out: [num_tokens, intermediate] bf16 = silu(gate) * up.
void silu_mul(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int64_t num_tokens,
              int64_t intermediate, cudaStream_t stream);

}  // namespace optimate::cuda
