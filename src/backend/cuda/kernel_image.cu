// Which code of this build the current GPU loads: a kernel compiled like every portable one
// (the architectures OPTIMATE_CUDA_ARCHS gives them, CMakeLists.txt), asked for its image.
#include "backend/cuda/kernel_image.h"

namespace optimate::cuda {
namespace {

__global__ void kernel_image_probe() {}

}  // namespace

cudaError_t loaded_kernel_image(KernelImage& image) {
  cudaFuncAttributes attributes{};
  const cudaError_t status = cudaFuncGetAttributes(&attributes, kernel_image_probe);
  if (status != cudaSuccess) {
    cudaGetLastError();  // not sticky: later calls must not report it
    return status;
  }
  image.binary_version = attributes.binaryVersion;
  image.ptx_version = attributes.ptxVersion;
  return cudaSuccess;
}

}  // namespace optimate::cuda
