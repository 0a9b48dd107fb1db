// The two generations of the GEMM path's elementwise kernels (RMSNorm, RoPE with the KV write,
// SiLU*mul), kept side by side so a benchmark can set one against the other in one run.
#pragma once

namespace optimate::cuda {

enum class ElementwiseKernels {
  // Row kernels holding a row in registers with 16-byte accesses (one pass over memory), RoPE
  // and the KV write in one launch, FP8 activations rounded by the kernel that makes them.
  kCurrent,
  // The kernels before them: 4-byte accesses and two passes in RMSNorm, RoPE and the KV write
  // as two launches, a separate pass rounding each FP8 linear's input.
  kBaseline,
};

}  // namespace optimate::cuda
