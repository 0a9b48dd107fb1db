// A tensor in host memory as stored in a model file: a view into a mapped file (or an owned
// buffer), in any DType, quantized ones included.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace optimate {

struct HostTensor {
  std::string name;
  DType dtype = DType::kF32;
  // Row-major, outermost first (PyTorch order): a Linear weight is [out_features, in_features].
  // GGUF stores dimensions innermost first; its reader reverses them.
  std::vector<int64_t> shape;
  std::span<const uint8_t> data;      // exactly dtype_row_bytes(dtype, num_elems()) bytes
  std::shared_ptr<const void> owner;  // keeps `data` alive (the mapping or an owned buffer)

  int64_t num_elems() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t dim(int i) const { return shape.at(i < 0 ? shape.size() + i : i); }
  bool empty() const { return data.empty(); }
};

// Dequantizes (or widens) the whole tensor to fp32.
std::vector<float> to_f32(const HostTensor& t);

// Dequantizes `num_elems` consecutive elements starting at `src` (which must be at a block
// boundary); num_elems must be a multiple of the dtype's block size.
void dequantize_row(DType dtype, const uint8_t* src, float* dst, int64_t num_elems);

// Builds an owned fp32 tensor (tests, dummy weights).
HostTensor make_f32_tensor(std::string name, std::vector<int64_t> shape, std::vector<float> values);

}  // namespace optimate
