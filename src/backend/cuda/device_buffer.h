// Owning handle to device memory (cudaMalloc), move-only. Sizes are in elements of T. A
// DeviceView is a typed window into one: buffers whose lives never overlap within a step share
// an allocation through views.
#pragma once

#include <cstddef>
#include <utility>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"

namespace optimate::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) { resize(count); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { reset(); }

  void resize(size_t count) {
    reset();
    if (count == 0) return;
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, count * sizeof(T));
    if (status != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
      throw_out_of_memory(format_braces("cudaMalloc of {} bytes failed: {}", count * sizeof(T),
                                        cudaGetErrorString(status)));
    }
    ptr_ = static_cast<T*>(p);
    count_ = count;
  }
  void reset() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }

  T* get() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  bool empty() const { return count_ == 0; }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

template <typename T>
struct DeviceView {
  T* ptr = nullptr;
  size_t count = 0;
  T* get() const { return ptr; }
  size_t size() const { return count; }
  size_t bytes() const { return count * sizeof(T); }
};

}  // namespace optimate::cuda
