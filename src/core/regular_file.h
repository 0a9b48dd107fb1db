// A file a user named, opened for reading only when it is a regular file: never a FIFO (whose
// open would wait for a writer), a device (/dev/zero has no end), a socket or a directory.
// Text files (core/text_file.h) and memory-mapped weights (core/mapped_file.h) open through it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace optimate {

class RegularFile {
 public:
  // `name` begins every message ("--file x.txt", "config file a.toml", "'model.gguf'"). A
  // missing file is ErrorCode::kNotFound, a directory kInvalidArgument, the rest kInvalidFile.
  RegularFile(const std::string& path, std::string_view name);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  int fd() const { return fd_; }
  size_t size() const { return size_; }

 private:
  int fd_ = -1;
  size_t size_ = 0;
};

}  // namespace optimate
