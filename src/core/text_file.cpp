#include "core/text_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace optimate {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::string read_regular_file(const std::string& path, std::string_view name, size_t max_bytes) {
  // Non-blocking: opening a FIFO for reading would otherwise wait for a writer.
  const Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) {
    const int e = errno;
    if (e == ENOENT) fail(ErrorCode::kNotFound, "{}: no such file", name);
    fail(ErrorCode::kInvalidFile, "{}: cannot open: {}", name, std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail(ErrorCode::kInvalidFile, "{}: cannot read: {}", name, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail(ErrorCode::kInvalidArgument, "{}: is a directory, not a file", name);
  if (!S_ISREG(st.st_mode)) fail(ErrorCode::kInvalidFile, "{}: not a regular file (a pipe, socket or device)", name);
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    fail(ErrorCode::kInvalidFile, "{}: {} bytes, more than the {} this reads", name, st.st_size, max_bytes);
  std::string text;
  text.reserve(static_cast<size_t>(st.st_size));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), chunk, sizeof chunk);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(ErrorCode::kInvalidFile, "{}: cannot read: {}", name, std::strerror(errno));
    }
    if (text.size() + static_cast<size_t>(n) > max_bytes)  // grew while read
      fail(ErrorCode::kInvalidFile, "{}: more than the {} bytes this reads", name, max_bytes);
    text.append(chunk, static_cast<size_t>(n));
  }
  return text;
}

std::string read_text_file(const std::string& path, std::string_view flag) {
  return read_regular_file(path, std::string(flag) + " " + path, kMaxTextFileBytes);
}

}  // namespace optimate
