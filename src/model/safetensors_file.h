// safetensors reader: 8-byte little-endian header length, JSON header, raw data. Tensor data is
// viewed in place through a memory mapping. Header length, offsets, shapes and dtypes are
// validated against the file (overlaps and out-of-range offsets are errors).
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/mapped_file.h"
#include "model/host_tensor.h"

namespace optimate {

class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  static std::shared_ptr<SafetensorsFile> parse(std::span<const uint8_t> bytes, std::string name);

  const std::string& name() const { return name_; }
  bool has_tensor(std::string_view name) const;
  HostTensor tensor(std::string_view name) const;  // throws Error(kNotFound) naming file+tensor
  std::vector<std::string> tensor_names() const;

 private:
  SafetensorsFile() = default;
  std::string name_;
  std::map<std::string, HostTensor, std::less<>> tensors_;
  std::shared_ptr<MappedFile> mapping_;
};

}  // namespace optimate
