// A family of kernels a runner can switch between at run time (the kernels policy slot): one
// operation (sampling, decode attention, ...) with several implementations that compute the
// same thing. The stable variant is the one the runner runs by default, measured and trusted;
// the others are alternatives an optimizer may choose, watched while they run (a variant that
// misbehaves or runs slower than its stable twin falls back to it).
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace optimate {

struct KernelFamily {
  std::string name;                   // one of kKernelFamilyNames
  std::vector<std::string> variants;  // every variant, the stable one included
  std::string stable;
};

// The families any runner may offer (the options of the kernels optimizer):
//   sampling     the GPU's token sampler: fused (one kernel a row, the stable one) or unfused
//                (softmax, sort, cumulative sum, cut and draw as separate launches)
//   elementwise  the GPU's RoPE + KV write, RMSNorm and SiLU*mul of wider steps: fused or separate
//   q8_kernel    the CPU's integer dot products: avx512-vnni or avx2, where the processor has both
inline constexpr std::array<std::string_view, 3> kKernelFamilyNames = {"sampling", "elementwise", "q8_kernel"};

// Error(kInvalidArgument): the runner has no such family (defined out of line, so a header that
// declares runners stays free of the formatting library CUDA sources cannot compile).
[[noreturn]] void fail_unknown_kernel_family(std::string_view family);

}  // namespace optimate
