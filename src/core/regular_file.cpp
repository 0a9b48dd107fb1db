#include "core/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace optimate {

RegularFile::RegularFile(const std::string& path, std::string_view name) {
  // Non-blocking: opening a FIFO for reading would otherwise wait for a writer.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) {
    const int e = errno;
    if (e == ENOENT) fail(ErrorCode::kNotFound, "{}: no such file", name);
    fail(ErrorCode::kInvalidFile, "{}: cannot open: {}", name, std::strerror(e));
  }
  struct stat st {};
  const int stat_error = ::fstat(fd_, &st) != 0 ? errno : 0;
  const char* refusal = stat_error != 0      ? std::strerror(stat_error)
                        : S_ISDIR(st.st_mode) ? "is a directory, not a file"
                        : !S_ISREG(st.st_mode) ? "not a regular file (a pipe, socket or device)"
                                               : nullptr;
  if (refusal != nullptr) {
    ::close(fd_);
    fail(stat_error == 0 && S_ISDIR(st.st_mode) ? ErrorCode::kInvalidArgument : ErrorCode::kInvalidFile, "{}: {}",
         name, refusal);
  }
  size_ = static_cast<size_t>(st.st_size);
}

RegularFile::~RegularFile() { ::close(fd_); }

}  // namespace optimate
