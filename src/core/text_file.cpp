#include "core/text_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/regular_file.h"

namespace optimate {

std::string read_regular_file(const std::string& path, std::string_view name, size_t max_bytes) {
  const RegularFile file(path, name);
  if (file.size() > max_bytes)
    fail(ErrorCode::kInvalidFile, "{}: {} bytes, more than the {} this reads", name, file.size(), max_bytes);
  std::string text;
  text.reserve(file.size());
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(file.fd(), chunk, sizeof chunk);
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
