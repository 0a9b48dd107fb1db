#include "model/host_tensor.h"

#include <cstring>

#include "core/error.h"

namespace optimate {

std::vector<float> to_f32(const HostTensor& t) {
  const int64_t n = t.num_elems();
  const int64_t block_elems = static_cast<int64_t>(dtype_block_elems(t.dtype));
  if (n % block_elems != 0 || t.data.size() != dtype_row_bytes(t.dtype, static_cast<size_t>(n))) {
    fail(ErrorCode::kInvalidFile, "tensor '{}': {} bytes do not hold {} {} elements", t.name,
         t.data.size(), n, dtype_name(t.dtype));
  }
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t.dtype, t.data.data(), out.data(), n);
  return out;
}

HostTensor make_f32_tensor(std::string name, std::vector<int64_t> shape,
                           std::vector<float> values) {
  HostTensor t;
  t.name = std::move(name);
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  if (static_cast<int64_t>(values.size()) != t.num_elems()) {
    fail(ErrorCode::kInvalidArgument, "tensor '{}': {} values for {} elements", t.name,
         values.size(), t.num_elems());
  }
  auto buffer = std::make_shared<std::vector<float>>(std::move(values));
  t.data = {reinterpret_cast<const uint8_t*>(buffer->data()), buffer->size() * sizeof(float)};
  t.owner = std::move(buffer);
  return t;
}

}  // namespace optimate
