#include "core/mapped_file.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "core/regular_file.h"

namespace optimate {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const RegularFile file(path, fmt::format("'{}'", path));
  size_ = file.size();
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
    if (p == MAP_FAILED) fail(ErrorCode::kInvalidFile, "cannot map '{}': {}", path, std::strerror(errno));
    data_ = static_cast<const uint8_t*>(p);
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace optimate
