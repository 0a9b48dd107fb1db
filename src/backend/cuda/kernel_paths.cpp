// The kernel-path decision and the start-time feature checks: pure functions of what a GPU
// reports, so they are tested without one (tests/cuda_host/kernel_paths_test.cpp).
#include "backend/cuda/kernel_paths.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace optimate::cuda {
namespace {

bool at_least(ComputeCapability cc, ComputeCapability floor) { return cc.value() >= floor.value(); }

std::string gpu_name(const GpuDescription& gpu) {
  return fmt::format("GPU {} ({}, compute capability {}.{})", gpu.device, gpu.name, gpu.cc.major, gpu.cc.minor);
}

[[noreturn]] void fail_fp8(const KernelPaths& paths, const std::string& setting, const std::string& alternatives) {
  fail(ErrorCode::kUnsupported,
       "{} needs compute capability {}.{} or newer (Ada: L4, L40S, RTX 40xx; Hopper: H100, H200), which converts "
       "FP8 in hardware; {} does not. {}",
       setting, kFp8ComputeCapability.major, kFp8ComputeCapability.minor, gpu_name(paths.gpu), alternatives);
}

}  // namespace

KernelPathRequest parse_kernel_path_request(std::string_view value) {
  if (value.empty() || value == "auto") return KernelPathRequest::kAuto;
  if (value == "portable") return KernelPathRequest::kPortable;
  fail(ErrorCode::kInvalidArgument, "OPTIMATE_CUDA_KERNELS={}: expected auto (by the GPU's compute capability) or "
       "portable (the kernels of compute capability 8.0 on any GPU)", value);
}

KernelPaths choose_kernel_paths(const GpuDescription& gpu, KernelPathRequest request) {
  if (!at_least(gpu.cc, kMinComputeCapability))
    fail(ErrorCode::kUnsupported,
         "{} is too old for the CUDA backend, which needs compute capability {}.{} or newer (Ampere: A100, A10, "
         "RTX 30xx; Ada: L4, L40S, RTX 40xx; Hopper: H100, H200) for bf16 tensor cores and asynchronous copies; "
         "serve on the CPU (--device cpu)",
         gpu_name(gpu), kMinComputeCapability.major, kMinComputeCapability.minor);
  KernelPaths paths;
  paths.gpu = gpu;
  const bool hopper = at_least(gpu.cc, kHopperComputeCapability);
  paths.forced = request == KernelPathRequest::kPortable;
  paths.path = hopper && !paths.forced ? KernelPath::kHopper : KernelPath::kPortable;
  paths.head_clusters = paths.path == KernelPath::kHopper;
  paths.programmatic_launch = paths.path == KernelPath::kHopper;
  paths.fp8 = at_least(gpu.cc, kFp8ComputeCapability);
  paths.variant_smem_bytes = paths.forced ? std::min(gpu.smem_block_optin_bytes, kPortableSmemBlockBytes)
                                     : gpu.smem_block_optin_bytes;
  return paths;
}

std::string KernelPaths::describe() const {
  std::string kernels =
      path == KernelPath::kHopper
          ? std::string("Hopper kernels (head-cluster decode attention, programmatic dependent launch)")
          : fmt::format("portable kernels{} (split tensor-core decode attention, launches in stream order{})",
                        forced ? ", forced by OPTIMATE_CUDA_KERNELS=portable" : "",
                        forced ? fmt::format(", variants sized for {} KB of shared memory a block",
                                             variant_smem_bytes / 1024)
                               : std::string());
  return fmt::format("{}: {} SMs, {:.1f} GiB, {} KB of shared memory a block; {}; {}", gpu_name(gpu), gpu.num_sms,
                     static_cast<double>(gpu.total_bytes) / (1024.0 * 1024.0 * 1024.0),
                     gpu.smem_block_optin_bytes / 1024, kernels,
                     fp8 ? "FP8 in hardware" : "no FP8 (--quantization fp8 and fp8 KV need 8.9)");
}

void check_gpu_features(const KernelPaths& paths, WeightQuantization quantization, kv::KvPrecision kv_cache_dtype,
                        std::optional<kv::KvPrecision> kv_finest_precision) {
  if (paths.fp8) return;
  if (quantization == WeightQuantization::kFp8)
    fail_fp8(paths, "--quantization fp8 (FP8 weights)",
             "Serve the weights in bf16 (--quantization none), or use a GPU of 8.9 or newer.");
  if (kv_cache_dtype == kv::KvPrecision::kFP8)
    fail_fp8(paths, "--kv-cache-dtype fp8",
             "Use --kv-cache-dtype int8 (as many bytes a value as fp8, one scale a row) or int4, or keep bf16.");
  if (kv_finest_precision == kv::KvPrecision::kFP8)
    fail_fp8(paths, "the kv_quant optimizer with bits = \"fp8\"",
             "Set optimizers.kv_quant.bits to 8 (int8 blocks) or 4 (int4 blocks).");
}

}  // namespace optimate::cuda
