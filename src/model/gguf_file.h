// GGUF v2/v3 reader: header, metadata key/values, tensor infos, alignment; tensor data is
// viewed in place through a memory mapping.
//
// Every offset, count and length read from the file is validated against the file size
// before use, so a truncated or hostile file yields an Error naming the file (and the key or
// tensor), never a crash or an allocation out of proportion to the file (parsed metadata takes
// at most a small constant times the file's size).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/mapped_file.h"
#include "model/host_tensor.h"

namespace optimate {

enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};

// A metadata value. Integers of every width are held as int64 (uint64 values past INT64_MAX are
// rejected), floats as double. Arrays are homogeneous.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  GgufType elem_type = GgufType::kUint8;  // for arrays
  std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>,
               std::vector<std::string>, std::vector<bool>>
      value;

  // Typed accessors; each throws Error(kInvalidFile) when the value has another type.
  int64_t as_int() const;
  double as_float() const;  // accepts integers too
  bool as_bool() const;
  const std::string& as_string() const;
  const std::vector<int64_t>& as_ints() const;
  const std::vector<double>& as_floats() const;
  const std::vector<std::string>& as_strings() const;
};

// GGML's name for a tensor type id ("Q5_0", "IQ2_XS"...), or "" for ids GGML does not define.
std::string_view ggml_type_name(uint32_t ggml_type);

struct GgufTensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;  // PyTorch order (outermost first)
  uint64_t offset;             // from the start of the data section
  uint64_t num_bytes;
};

class GgufFile {
 public:
  // Maps and parses `path`. Throws Error(kNotFound/kInvalidFile/kUnsupported).
  static std::shared_ptr<GgufFile> open(const std::string& path);
  // Parses an in-memory image (fuzzing, tests); `bytes` must outlive the object.
  static std::shared_ptr<GgufFile> parse(std::span<const uint8_t> bytes, std::string name);

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensor_infos() const { return tensors_; }

  const GgufValue* find(std::string_view key) const;
  // Required keys: throw Error(kInvalidFile) naming the key when absent or mistyped.
  const GgufValue& at(std::string_view key) const;
  int64_t get_int(std::string_view key, int64_t fallback) const;
  double get_float(std::string_view key, double fallback) const;
  std::string get_string(std::string_view key, std::string_view fallback) const;

  bool has_tensor(std::string_view name) const;
  // A view of a tensor's data; throws Error(kNotFound) naming the file and tensor.
  HostTensor tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  std::string name_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;  // name -> tensors_ position
  std::span<const uint8_t> data_;  // the tensor data section
  std::shared_ptr<MappedFile> mapping_;
  std::shared_ptr<const void> self_owner_;  // what HostTensor::owner points at
};

}  // namespace optimate
