// Programmatic dependent launch (compute capability 9.0): a kernel launched this way may start
// while the kernel before it on the stream is still finishing, so its independent prologue
// (streaming the weights of a decode GEMV) overlaps the previous kernel's tail and the launch
// gap. Every kernel launched through launch_programmatic must call wait_for_prior_grid() before
// it touches memory that earlier kernels write or read; that call returns once the previous
// grid has completed and its writes are visible.
#pragma once

#include <utility>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"

namespace optimate::cuda {

// Process-wide launch policy (on by default; benchmarks turn it off to measure the gain), and
// only where the GPU is on the Hopper path (kernel_paths.h): elsewhere launches keep stream
// order and wait_for_prior_grid() returns at once.
bool programmatic_launch_enabled();
void set_programmatic_launch(bool enabled);

template <typename... Params, typename... Args>
void launch_programmatic(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                         cudaStream_t stream, const char* name, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = programmatic_launch_enabled() ? 1 : 0;
  const cudaError_t status = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (status != cudaSuccess) throw_cuda_error(status, name, __FILE__, __LINE__);
}

}  // namespace optimate::cuda
