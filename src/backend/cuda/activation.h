// SiLU-gated linear unit of the Llama MLP.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/elementwise_kernels.h"
#include "backend/cuda/fp8_quantize.h"

namespace optimate::cuda {

// gate_up: [num_tokens, 2 * intermediate] bf16, the fused gate/up GEMM output (gate columns
// first); out: [num_tokens, intermediate] bf16 = silu(gate) * up.
void silu_mul(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int64_t num_tokens,
              int64_t intermediate, cudaStream_t stream,
              ElementwiseKernels kernels = ElementwiseKernels::kCurrent);

// Whether silu_mul_fp8 takes rows of `intermediate` outputs (a multiple of 8, at most 65536).
bool silu_mul_fp8_fits(int64_t intermediate);

// silu_mul whose output feeds an FP8 linear: each row rounded to bf16, then to e4m3 with its
// own scale, so `out` holds exactly what quantize_fp8_rows makes of silu_mul's bf16 output.
// Needs silu_mul_fp8_fits(intermediate).
void silu_mul_fp8(const __nv_bfloat16* gate_up, const Fp8Activations& out, int64_t num_tokens,
                  int64_t intermediate, cudaStream_t stream);

}  // namespace optimate::cuda
