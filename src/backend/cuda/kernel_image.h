// The code the current GPU loads for the portable kernels: the architecture of the cubin (or of
// the PTX compiled at load) that the CUDA runtime picked from this build's fat binaries.
#pragma once

#include <cuda_runtime.h>

namespace optimate::cuda {

struct KernelImage {
  int binary_version = 0;  // 80: an sm_80 cubin, 90: sm_90 (or PTX compiled for it at load)
  int ptx_version = 0;     // the PTX the image came from, or was compiled with
};

// cudaErrorNoKernelImageForDevice (or cudaErrorInvalidDeviceFunction) when the build holds no
// code the GPU can run; the error is cleared.
cudaError_t loaded_kernel_image(KernelImage& image);

}  // namespace optimate::cuda
