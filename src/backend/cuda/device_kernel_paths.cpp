// Each GPU's kernel paths (kernel_paths.h), asked of the CUDA runtime once and logged.
#include <array>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernel_image.h"
#include "backend/cuda/kernel_paths.h"
#include "backend/cuda/per_device.h"
#include "core/error.h"
#include "core/logging.h"

#ifndef OPTIMATE_CUDA_ARCHS_BUILT
#define OPTIMATE_CUDA_ARCHS_BUILT "unknown"
#endif

namespace optimate::cuda {
namespace {

KernelPathRequest requested_path() {
  // Read once: every GPU of the process gets the same answer.
  static const KernelPathRequest request = [] {
    const char* value = std::getenv("OPTIMATE_CUDA_KERNELS");
    return parse_kernel_path_request(value ? value : "");
  }();
  return request;
}

GpuDescription describe_gpu(int device) {
  cudaDeviceProp prop{};
  OPTIMATE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  GpuDescription gpu;
  gpu.device = device;
  gpu.name = prop.name;
  gpu.cc = {prop.major, prop.minor};
  gpu.num_sms = prop.multiProcessorCount;
  gpu.total_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  gpu.smem_block_optin_bytes = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  gpu.smem_sm_bytes = static_cast<int64_t>(prop.sharedMemPerMultiprocessor);
  gpu.smem_block_reserved_bytes = static_cast<int64_t>(prop.reservedSharedMemPerBlock);
  return gpu;
}

// The image the runtime loads for this build's portable kernels on `device`.
KernelImage load_image(const KernelPaths& paths) {
  int caller = 0;
  OPTIMATE_CUDA_CHECK(cudaGetDevice(&caller));
  OPTIMATE_CUDA_CHECK(cudaSetDevice(paths.gpu.device));
  KernelImage image;
  const cudaError_t status = loaded_kernel_image(image);
  OPTIMATE_CUDA_CHECK(cudaSetDevice(caller));
  if (status != cudaSuccess)
    fail(ErrorCode::kUnsupported,
         "this build holds no code GPU {} ({}, compute capability {}.{}) can load: it was built for "
         "OPTIMATE_CUDA_ARCHS={}; rebuild with {}{} in that list ({})",
         paths.gpu.device, paths.gpu.name, paths.gpu.cc.major, paths.gpu.cc.minor, OPTIMATE_CUDA_ARCHS_BUILT,
         paths.gpu.cc.major, paths.gpu.cc.minor, cudaGetErrorString(status));
  return image;
}

KernelPaths decide(int device) {
  const KernelPaths paths = choose_kernel_paths(describe_gpu(device), requested_path());
  const KernelImage image = load_image(paths);
  spdlog::info("CUDA {}; code: sm_{} (PTX {}) of OPTIMATE_CUDA_ARCHS={}", paths.describe(), image.binary_version,
               image.ptx_version, OPTIMATE_CUDA_ARCHS_BUILT);
  return paths;
}

}  // namespace

const KernelPaths& device_kernel_paths(int device) {
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<std::optional<KernelPaths>, kMaxDevices> paths;
  OPTIMATE_SHAPE_CHECK(device >= 0 && device < kMaxDevices, "GPU {} (at most {})", device, kMaxDevices);
  const auto d = static_cast<size_t>(device);
  std::call_once(once[d], [&] { paths[d] = decide(device); });  // a throw leaves it to the next call
  return *paths[d];
}

const KernelPaths& device_kernel_paths() {
  int device = 0;
  OPTIMATE_CUDA_CHECK(cudaGetDevice(&device));
  return device_kernel_paths(device);
}

int64_t max_dynamic_smem(const void* kernel) {
  cudaFuncAttributes attributes{};
  OPTIMATE_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  return device_kernel_paths().gpu.smem_block_optin_bytes - static_cast<int64_t>(attributes.sharedSizeBytes);
}

bool cuda_device_supported(int device, std::string* why) {
  try {
    device_kernel_paths(device);
    return true;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return false;
  }
}

}  // namespace optimate::cuda
