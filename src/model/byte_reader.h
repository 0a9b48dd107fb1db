// A bounds-checked little-endian cursor over an untrusted byte image. Every read checks the
// remaining length first, so parsers built on it fail with an Error naming the file, the field
// and the offset instead of reading past the end.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/error.h"

namespace optimate {

class ByteReader {
 public:
  ByteReader(std::span<const uint8_t> bytes, const std::string& file) : bytes_(bytes), file_(file) {}

  size_t offset() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }
  const std::string& file() const { return file_; }

  template <typename T>
  T read(std::string_view what) {
    static_assert(std::is_trivially_copyable_v<T>);
    require(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));  // the formats are little-endian, as is x86
    pos_ += sizeof(T);
    return v;
  }

  // A uint64 length followed by that many bytes.
  std::string_view read_string(std::string_view what) {
    const uint64_t len = read<uint64_t>(what);
    if (len > remaining()) {
      fail(ErrorCode::kInvalidFile, "'{}': {} claims {} bytes at offset {}, only {} remain",
           file_, what, len, pos_, remaining());
    }
    std::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return s;
  }

  void require(uint64_t num_bytes, std::string_view what) const {
    if (num_bytes > remaining()) {
      fail(ErrorCode::kInvalidFile, "'{}': truncated: {} needs {} bytes at offset {}, {} remain",
           file_, what, num_bytes, pos_, remaining());
    }
  }

  // Fails unless `count` items of at least `min_item_bytes` each can still fit: a cheap bound
  // checked before reserving memory for `count` items.
  void require_items(uint64_t count, uint64_t min_item_bytes, std::string_view what) const {
    if (min_item_bytes != 0 && count > remaining() / min_item_bytes) {
      fail(ErrorCode::kInvalidFile, "'{}': {} count {} at offset {} cannot fit in the {} bytes left",
           file_, what, count, pos_, remaining());
    }
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& file_;
  size_t pos_ = 0;
};

}  // namespace optimate
