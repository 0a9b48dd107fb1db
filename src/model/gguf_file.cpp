// GGUF parsing. Layout (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md):
//   "GGUF" u32 version, u64 tensor_count, u64 kv_count,
//   kv_count x (string key, u32 type, value), tensor_count x (string name, u32 n_dims,
//   n_dims x u64 ne (innermost first), u32 ggml_type, u64 offset), padding to
//   general.alignment, then the data section that tensor offsets point into.
#include <algorithm>
#include <limits>

#include "core/error.h"
#include "model/byte_reader.h"
#include "model/gguf_file.h"

namespace optimate {
namespace {

constexpr uint32_t kDefaultAlignment = 32;
constexpr uint64_t kMaxNameBytes = 1 << 16;
constexpr uint32_t kMaxDims = 4;                   // GGML_MAX_DIMS
constexpr uint64_t kMaxElems = uint64_t{1} << 50;  // far past any model, far below overflow

// Smallest encoding of one item, used to bound counts before reserving memory.
uint64_t min_encoded_bytes(GgufType t) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
    case GgufType::kString: return 8;
    case GgufType::kArray: return 12;
  }
  return 1;
}

GgufType read_type(ByteReader& r, std::string_view key) {
  const auto t = r.read<uint32_t>("value type");
  if (t > static_cast<uint32_t>(GgufType::kFloat64)) {
    fail(ErrorCode::kInvalidFile, "'{}': key '{}' has unknown value type {}", r.file(), key, t);
  }
  return static_cast<GgufType>(t);
}

// Reads one scalar of type `t` as int64/double/bool/string.
template <typename Sink>
void read_scalar(ByteReader& r, GgufType t, std::string_view key, Sink&& sink) {
  switch (t) {
    case GgufType::kUint8: sink(int64_t{r.read<uint8_t>(key)}); return;
    case GgufType::kInt8: sink(int64_t{r.read<int8_t>(key)}); return;
    case GgufType::kUint16: sink(int64_t{r.read<uint16_t>(key)}); return;
    case GgufType::kInt16: sink(int64_t{r.read<int16_t>(key)}); return;
    case GgufType::kUint32: sink(int64_t{r.read<uint32_t>(key)}); return;
    case GgufType::kInt32: sink(int64_t{r.read<int32_t>(key)}); return;
    case GgufType::kInt64: sink(r.read<int64_t>(key)); return;
    case GgufType::kUint64: {
      const auto v = r.read<uint64_t>(key);
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(ErrorCode::kInvalidFile, "'{}': key '{}' holds {}, past the int64 range", r.file(),
             key, v);
      }
      sink(static_cast<int64_t>(v));
      return;
    }
    case GgufType::kFloat32: sink(double{r.read<float>(key)}); return;
    case GgufType::kFloat64: sink(r.read<double>(key)); return;
    case GgufType::kBool: sink(r.read<uint8_t>(key) != 0); return;
    case GgufType::kString: sink(std::string(r.read_string(key))); return;
    case GgufType::kArray: break;
  }
  fail(ErrorCode::kUnsupported, "'{}': key '{}' holds nested arrays", r.file(), key);
}

template <typename T>
std::vector<T> read_array_of(ByteReader& r, GgufType elem, uint64_t count, std::string_view key) {
  std::vector<T> out;
  out.reserve(count);  // bounded by the bytes left: checked by the caller
  for (uint64_t i = 0; i < count; ++i) {
    read_scalar(r, elem, key, [&](auto v) {
      if constexpr (std::is_convertible_v<decltype(v), T>) out.push_back(static_cast<T>(v));
    });
  }
  return out;
}

GgufValue read_value(ByteReader& r, GgufType type, std::string_view key) {
  GgufValue v;
  v.type = type;
  if (type != GgufType::kArray) {
    read_scalar(r, type, key, [&](auto x) { v.value = std::move(x); });
    return v;
  }
  v.elem_type = read_type(r, key);
  const auto count = r.read<uint64_t>(key);
  r.require_items(count, min_encoded_bytes(v.elem_type), key);
  switch (v.elem_type) {
    case GgufType::kFloat32:
    case GgufType::kFloat64: v.value = read_array_of<double>(r, v.elem_type, count, key); break;
    case GgufType::kBool: v.value = read_array_of<bool>(r, v.elem_type, count, key); break;
    case GgufType::kString: {
      std::vector<std::string> strings;
      strings.reserve(count);
      for (uint64_t i = 0; i < count; ++i) strings.emplace_back(r.read_string(key));
      v.value = std::move(strings);
      break;
    }
    case GgufType::kArray:
      fail(ErrorCode::kUnsupported, "'{}': key '{}' holds nested arrays", r.file(), key);
    default: v.value = read_array_of<int64_t>(r, v.elem_type, count, key); break;
  }
  return v;
}

// GGML type id -> DType, for the types Optimate computes with.
bool dtype_from_ggml(uint32_t ggml_type, DType* out) {
  switch (ggml_type) {
    case 0: *out = DType::kF32; return true;
    case 1: *out = DType::kF16; return true;
    case 2: *out = DType::kQ4_0; return true;
    case 3: *out = DType::kQ4_1; return true;
    case 8: *out = DType::kQ8_0; return true;
    case 12: *out = DType::kQ4_K; return true;
    case 13: *out = DType::kQ5_K; return true;
    case 14: *out = DType::kQ6_K; return true;
    case 24: *out = DType::kI8; return true;
    case 26: *out = DType::kI32; return true;
    case 30: *out = DType::kBF16; return true;
    default: return false;
  }
}

GgufTensorInfo read_tensor_info(ByteReader& r) {
  GgufTensorInfo info;
  const auto name = r.read_string("tensor name");
  if (name.size() > kMaxNameBytes) {
    fail(ErrorCode::kInvalidFile, "'{}': tensor name of {} bytes", r.file(), name.size());
  }
  info.name = std::string(name);
  const auto n_dims = r.read<uint32_t>(info.name);
  if (n_dims == 0 || n_dims > kMaxDims) {
    fail(ErrorCode::kInvalidFile, "'{}': tensor '{}' has {} dimensions (1 to {} allowed)",
         r.file(), info.name, n_dims, kMaxDims);
  }
  uint64_t num_elems = 1;
  std::vector<int64_t> ne(n_dims);
  for (uint32_t i = 0; i < n_dims; ++i) {
    const auto d = r.read<uint64_t>(info.name);
    if (d == 0 || d > kMaxElems || num_elems > kMaxElems / d) {
      fail(ErrorCode::kInvalidFile, "'{}': tensor '{}' has an invalid dimension {}", r.file(),
           info.name, d);
    }
    num_elems *= d;
    ne[i] = static_cast<int64_t>(d);
  }
  info.shape.assign(ne.rbegin(), ne.rend());
  const auto ggml_type = r.read<uint32_t>(info.name);
  if (!dtype_from_ggml(ggml_type, &info.dtype)) {
    const auto type_name = ggml_type_name(ggml_type);
    if (type_name.empty()) {
      fail(ErrorCode::kInvalidFile, "'{}': tensor '{}' has unknown GGML type {}", r.file(),
           info.name, ggml_type);
    }
    fail(ErrorCode::kUnsupported, "'{}': tensor '{}' has type {}, which is not supported "
         "(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K, I8, I32)",
         r.file(), info.name, type_name);
  }
  const auto block = dtype_block_elems(info.dtype);
  if (static_cast<uint64_t>(ne[0]) % block != 0) {
    fail(ErrorCode::kInvalidFile, "'{}': tensor '{}' of type {} has rows of {} elements, not a "
         "multiple of its block size {}", r.file(), info.name, dtype_name(info.dtype), ne[0], block);
  }
  info.num_bytes = num_elems / block * dtype_block_bytes(info.dtype);
  info.offset = r.read<uint64_t>(info.name);
  return info;
}

}  // namespace

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  auto mapping = std::make_shared<MappedFile>(path);
  auto file = parse(mapping->bytes(), path);
  file->mapping_ = mapping;
  file->self_owner_ = mapping;
  return file;
}

std::shared_ptr<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, std::string name) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->name_ = std::move(name);
  ByteReader r(bytes, f->name_);
  const auto magic = r.read<uint32_t>("magic");
  if (magic != 0x46554747u) {  // "GGUF"
    fail(ErrorCode::kInvalidFile, "'{}' is not a GGUF file (bad magic)", f->name_);
  }
  f->version_ = r.read<uint32_t>("version");
  if (f->version_ != 2 && f->version_ != 3) {
    fail(ErrorCode::kUnsupported, "'{}': GGUF version {} is not supported (2 and 3 are; "
         "big-endian files are not)", f->name_, f->version_);
  }
  const auto tensor_count = r.read<uint64_t>("tensor count");
  const auto kv_count = r.read<uint64_t>("metadata count");
  r.require_items(kv_count, 8 + 4 + 1, "metadata");
  for (uint64_t i = 0; i < kv_count; ++i) {
    const std::string key(r.read_string("metadata key"));
    const GgufType type = read_type(r, key);
    GgufValue value = read_value(r, type, key);
    if (!f->metadata_.emplace(key, std::move(value)).second) {
      fail(ErrorCode::kInvalidFile, "'{}': duplicate metadata key '{}'", f->name_, key);
    }
  }
  r.require_items(tensor_count, 8 + 4 + 8 + 4 + 8, "tensor info");
  f->tensors_.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    f->tensors_.push_back(read_tensor_info(r));
    if (!f->tensor_index_.emplace(f->tensors_.back().name, i).second) {
      fail(ErrorCode::kInvalidFile, "'{}': duplicate tensor '{}'", f->name_,
           f->tensors_.back().name);
    }
  }

  uint64_t alignment = kDefaultAlignment;
  if (const GgufValue* a = f->find("general.alignment")) {
    const int64_t v = a->type == GgufType::kArray ? 0 : a->as_int();
    if (v <= 0 || v > (1 << 20) || (v & (v - 1)) != 0) {
      fail(ErrorCode::kInvalidFile, "'{}': general.alignment is not a power of two up to 2^20",
           f->name_);
    }
    alignment = static_cast<uint64_t>(v);
  }
  const uint64_t data_start = (r.offset() + alignment - 1) / alignment * alignment;
  if (data_start <= bytes.size()) f->data_ = bytes.subspan(data_start);

  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(f->tensors_.size());
  for (const auto& t : f->tensors_) {
    if (t.offset % alignment != 0) {
      fail(ErrorCode::kInvalidFile, "'{}': tensor '{}' at offset {} is not aligned to {}",
           f->name_, t.name, t.offset, alignment);
    }
    if (t.offset > f->data_.size() || t.num_bytes > f->data_.size() - t.offset) {
      fail(ErrorCode::kInvalidFile, "'{}': tensor '{}' ({} bytes at data offset {}) runs past "
           "the end of the file ({} data bytes)", f->name_, t.name, t.num_bytes, t.offset,
           f->data_.size());
    }
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto* prev = by_offset[i - 1];
    if (prev->offset + prev->num_bytes > by_offset[i]->offset) {
      fail(ErrorCode::kInvalidFile, "'{}': tensors '{}' and '{}' overlap", f->name_, prev->name,
           by_offset[i]->name);
    }
  }
  return f;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufValue& GgufFile::at(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail(ErrorCode::kInvalidFile, "'{}': missing metadata key '{}'", name_, key);
  return *v;
}

// The typed getters re-throw type errors with the file and key in the message.
namespace {
template <typename F>
auto with_key(const std::string& file, std::string_view key, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    fail(e.code(), "'{}': key '{}': {}", file, key, e.what());
  }
}
}  // namespace

int64_t GgufFile::get_int(std::string_view key, int64_t fallback) const {
  const GgufValue* v = find(key);
  return v ? with_key(name_, key, [&] { return v->as_int(); }) : fallback;
}

double GgufFile::get_float(std::string_view key, double fallback) const {
  const GgufValue* v = find(key);
  return v ? with_key(name_, key, [&] { return v->as_float(); }) : fallback;
}

std::string GgufFile::get_string(std::string_view key, std::string_view fallback) const {
  const GgufValue* v = find(key);
  return v ? with_key(name_, key, [&] { return v->as_string(); }) : std::string(fallback);
}

bool GgufFile::has_tensor(std::string_view name) const {
  return tensor_index_.find(name) != tensor_index_.end();
}

HostTensor GgufFile::tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  if (it == tensor_index_.end()) {
    fail(ErrorCode::kNotFound, "'{}': no tensor '{}'", name_, name);
  }
  const GgufTensorInfo& info = tensors_[it->second];
  HostTensor t;
  t.name = info.name;
  t.dtype = info.dtype;
  t.shape = info.shape;
  t.data = data_.subspan(info.offset, info.num_bytes);
  t.owner = self_owner_;
  return t;
}

}  // namespace optimate
