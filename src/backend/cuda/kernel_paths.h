// Which kernels a GPU runs, decided once per GPU from its compute capability and logged.
//
//   Hopper path (9.0 and later): decode attention for a few rows as thread-block clusters that
//     combine through distributed shared memory (paged_attention_heads.cu, compiled for Hopper
//     only), and programmatic dependent launch (programmatic_launch.h).
//   Portable path (8.0 and later: Ampere, Ada): the same kernels less those, on mma.sync and
//     cp.async only: a few rows' decode attention on the split tensor-core kernel, launches in
//     stream order.
//
// OPTIMATE_CUDA_KERNELS=portable forces the portable path on a Hopper GPU (the GPU suite proves
// the portable kernels on an H200 that way) and sizes the kernels whose variants depend on
// shared memory (prefill key tiles, the sampler's histograms) for the 99 KB a block that the
// smallest 8.x parts give, so a Hopper run covers what every older part runs. FP8 (e4m3
// conversions in hardware, FP8 matrix products: --quantization fp8, fp8 KV blocks) needs 8.9
// and is a property of the GPU, not of the path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kv/kv_precision.h"
#include "model/fp8_quant.h"

namespace optimate::cuda {

struct ComputeCapability {
  int major = 0;
  int minor = 0;
  int value() const { return 10 * major + minor; }  // 8.6 -> 86
};

// What OPTIMATE_CUDA_KERNELS asks: auto (by compute capability; also when unset) or portable.
enum class KernelPathRequest { kAuto, kPortable };

// Throws Error(kInvalidArgument) naming the accepted values.
KernelPathRequest parse_kernel_path_request(std::string_view value);

// What the decision reads of a GPU (cudaGetDeviceProperties).
struct GpuDescription {
  int device = 0;
  std::string name;
  ComputeCapability cc;
  int num_sms = 0;
  int64_t total_bytes = 0;
  int64_t smem_block_optin_bytes = 0;  // dynamic shared memory a block may opt into
  int64_t smem_sm_bytes = 0;           // shared memory of one SM
  int64_t smem_block_reserved_bytes = 0;  // what the system takes of it for each resident block
};

// Shared memory a block gets on the 8.x parts with the least of it (8.6, 8.9: 99 KB).
inline constexpr int64_t kPortableSmemBlockBytes = 99 * 1024;

enum class KernelPath { kHopper, kPortable };

struct KernelPaths {
  GpuDescription gpu;
  KernelPath path = KernelPath::kPortable;
  bool forced = false;               // OPTIMATE_CUDA_KERNELS=portable
  bool head_clusters = false;        // decode attention as thread-block clusters
  bool programmatic_launch = false;  // kernels may start before the one before them ends
  bool fp8 = false;                  // e4m3 conversions and FP8 matrix products (8.9+)
  // The shared memory a block may take when a kernel picks among variants by size: the GPU's,
  // or at most kPortableSmemBlockBytes when the portable path is forced.
  int64_t variant_smem_bytes = 0;
  std::string describe() const;  // one line for the start-up log
};

inline constexpr ComputeCapability kMinComputeCapability{8, 0};
inline constexpr ComputeCapability kHopperComputeCapability{9, 0};
inline constexpr ComputeCapability kFp8ComputeCapability{8, 9};

// The paths for `gpu`. Error(kUnsupported) below 8.0 (bf16 tensor cores, cp.async), naming the
// GPU and what it would take.
KernelPaths choose_kernel_paths(const GpuDescription& gpu, KernelPathRequest request);

// What a runner's options need of the GPU, checked before anything is loaded: FP8 weights and
// fp8 KV blocks (a cache of them, or kv_quant down from fp8) need 8.9. Error(kUnsupported)
// names the setting, the GPU and the alternatives.
void check_gpu_features(const KernelPaths& paths, WeightQuantization quantization, kv::KvPrecision kv_cache_dtype,
                        std::optional<kv::KvPrecision> kv_finest_precision);

// The current GPU's paths: decided at the first call on each GPU (OPTIMATE_CUDA_KERNELS read
// then), logged once, and the same for the life of the process. Error(kUnsupported) when the
// GPU is below 8.0 or this build holds no code it can load.
const KernelPaths& device_kernel_paths();
const KernelPaths& device_kernel_paths(int device);

// The dynamic shared memory `kernel` may opt into on the current GPU: the GPU's per-block limit
// less the kernel's own static shared memory (cudaFuncSetAttribute refuses more).
int64_t max_dynamic_smem(const void* kernel);

// Whether the CUDA backend can serve on `device` (without throwing): --device auto falls back
// to the CPU when it cannot.
bool cuda_device_supported(int device, std::string* why = nullptr);

}  // namespace optimate::cuda
