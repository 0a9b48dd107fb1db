// A read-only memory-mapped file. Model weights are read through it so loading an 8B model
// costs page faults, not copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace optimate {

class MappedFile {
 public:
  // Throws Error(kNotFound / kInvalidFile) naming the path; only a regular file is opened
  // (core/regular_file.h).
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace optimate
