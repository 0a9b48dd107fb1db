// Set-up the CUDA runtime keeps per GPU (a kernel's shared-memory opt-in through
// cudaFuncSetAttribute), done once for each GPU this process launches on: tensor-parallel ranks
// launch the same kernels on several GPUs from several threads, so a process-wide "done" flag
// would leave every GPU but the first without it.
#pragma once

#include <array>
#include <mutex>
#include <utility>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"

namespace optimate::cuda {

inline constexpr int kMaxDevices = 64;

using PerDeviceOnce = std::array<std::once_flag, kMaxDevices>;

// Runs fn the first time the calling thread's current GPU gets here (again if fn threw);
// returns that GPU.
template <typename F>
int once_per_device(PerDeviceOnce& flags, F&& fn) {
  int device = 0;
  OPTIMATE_CUDA_CHECK(cudaGetDevice(&device));
  OPTIMATE_SHAPE_CHECK(device >= 0 && device < kMaxDevices, "GPU {} (at most {})", device, kMaxDevices);
  std::call_once(flags[static_cast<size_t>(device)], std::forward<F>(fn));
  return device;
}

}  // namespace optimate::cuda
