// safetensors parsing (https://github.com/huggingface/safetensors, "Format"): u64 header size N,
// N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__"},
// then the byte buffer. As the reference implementation does, offsets must tile the buffer
// exactly: no overlaps, no holes, nothing past the end.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/safetensors_file.h"

namespace optimate {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference reader's limit
constexpr int kMaxJsonDepth = 4;                   // {"t": {"shape": [..]}} is depth 3
constexpr uint64_t kMaxDim = uint64_t{1} << 40;

bool dtype_from_name(std::string_view s, DType* out) {
  if (s == "F32") *out = DType::kF32;
  else if (s == "F16") *out = DType::kF16;
  else if (s == "BF16") *out = DType::kBF16;
  else return false;
  return true;
}

uint64_t as_u64(const nlohmann::json& j, const std::string& file, const std::string& tensor,
                std::string_view field) {
  if (!j.is_number_unsigned()) {
    fail(ErrorCode::kInvalidFile, "'{}': tensor '{}': {} must hold non-negative integers", file,
         tensor, field);
  }
  return j.get<uint64_t>();
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto mapping = std::make_shared<MappedFile>(path);
  auto file = parse(mapping->bytes(), path);
  file->mapping_ = mapping;
  for (auto& [name, t] : file->tensors_) t.owner = mapping;
  return file;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::parse(std::span<const uint8_t> bytes,
                                                        std::string name) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->name_ = std::move(name);
  const std::string& file = f->name_;
  if (bytes.size() < 8) fail(ErrorCode::kInvalidFile, "'{}': too short for safetensors", file);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | bytes[i];
  if (header_bytes > kMaxHeaderBytes || header_bytes > bytes.size() - 8) {
    fail(ErrorCode::kInvalidFile, "'{}': header of {} bytes does not fit in the file ({} bytes)",
         file, header_bytes, bytes.size());
  }
  const auto* header_begin = reinterpret_cast<const char*>(bytes.data() + 8);
  if (header_bytes == 0 || header_begin[0] != '{') {
    fail(ErrorCode::kInvalidFile, "'{}': header is not a JSON object", file);
  }
  const auto data = bytes.subspan(8 + header_bytes);

  nlohmann::json header;
  try {
    // A depth limit keeps hostile headers ("[[[[...") from costing deep recursion later.
    header = nlohmann::json::parse(
        header_begin, header_begin + header_bytes,
        [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
          if (depth > kMaxJsonDepth) {
            fail(ErrorCode::kInvalidFile, "'{}': header nests deeper than {}", file, kMaxJsonDepth);
          }
          return true;
        });
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::kInvalidFile, "'{}': header is not valid JSON: {}", file, e.what());
  }
  if (!header.is_object()) fail(ErrorCode::kInvalidFile, "'{}': header is not a JSON object", file);

  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (const auto& [tensor_name, entry] : header.items()) {
    if (tensor_name == "__metadata__") continue;
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets")) {
      fail(ErrorCode::kInvalidFile, "'{}': tensor '{}' needs dtype, shape and data_offsets", file,
           tensor_name);
    }
    HostTensor t;
    t.name = tensor_name;
    const auto& dtype = entry["dtype"];
    if (!dtype.is_string()) {
      fail(ErrorCode::kInvalidFile, "'{}': tensor '{}': dtype is not a string", file, tensor_name);
    }
    if (!dtype_from_name(dtype.get_ref<const std::string&>(), &t.dtype)) {
      fail(ErrorCode::kUnsupported, "'{}': tensor '{}' has dtype {}, which is not supported "
           "(F32, F16, BF16 are)", file, tensor_name, dtype.get_ref<const std::string&>());
    }
    const auto& shape = entry["shape"];
    if (!shape.is_array() || shape.size() > 8) {
      fail(ErrorCode::kInvalidFile, "'{}': tensor '{}': shape is not an array of up to 8 sizes",
           file, tensor_name);
    }
    uint64_t num_elems = 1;
    for (const auto& d : shape) {
      const uint64_t v = as_u64(d, file, tensor_name, "shape");
      if (v > kMaxDim || (v != 0 && num_elems > kMaxDim / v)) {
        fail(ErrorCode::kInvalidFile, "'{}': tensor '{}' has an absurd shape", file, tensor_name);
      }
      num_elems *= v;
      t.shape.push_back(static_cast<int64_t>(v));
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2) {
      fail(ErrorCode::kInvalidFile, "'{}': tensor '{}': data_offsets is not [begin, end]", file,
           tensor_name);
    }
    const uint64_t begin = as_u64(offsets[0], file, tensor_name, "data_offsets");
    const uint64_t end = as_u64(offsets[1], file, tensor_name, "data_offsets");
    if (begin > end || end > data.size()) {
      fail(ErrorCode::kInvalidFile, "'{}': tensor '{}': data_offsets [{}, {}] fall outside the {} "
           "data bytes", file, tensor_name, begin, end, data.size());
    }
    const uint64_t expected = num_elems * dtype_block_bytes(t.dtype);
    if (end - begin != expected) {
      fail(ErrorCode::kInvalidFile, "'{}': tensor '{}' spans {} bytes but its shape and dtype "
           "need {}", file, tensor_name, end - begin, expected);
    }
    t.data = data.subspan(begin, end - begin);
    auto [it, inserted] = f->tensors_.emplace(tensor_name, std::move(t));
    spans.push_back({begin, end, &it->first});
  }

  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (const Span& s : spans) {
    if (s.begin < covered) {
      fail(ErrorCode::kInvalidFile, "'{}': tensor '{}' overlaps another tensor", file, *s.name);
    }
    if (s.begin > covered) {
      fail(ErrorCode::kInvalidFile, "'{}': bytes [{}, {}) before tensor '{}' belong to no tensor",
           file, covered, s.begin, *s.name);
    }
    covered = s.end;
  }
  if (covered != data.size()) {
    fail(ErrorCode::kInvalidFile, "'{}': {} trailing data bytes belong to no tensor", file,
         data.size() - covered);
  }
  return f;
}

bool SafetensorsFile::has_tensor(std::string_view name) const {
  return tensors_.find(name) != tensors_.end();
}

HostTensor SafetensorsFile::tensor(std::string_view name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(ErrorCode::kNotFound, "'{}': no tensor '{}'", name_, name);
  return it->second;
}

std::vector<std::string> SafetensorsFile::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) names.push_back(name);
  return names;
}

}  // namespace optimate
