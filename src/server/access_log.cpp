#include "server/access_log.h"

#include <fmt/format.h>

namespace optimate::server {

namespace {

constexpr size_t kMaxTargetBytes = 512;

std::string escaped(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMaxTargetBytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  if (s.size() > kMaxTargetBytes) out += "...";
  return out;
}

}  // namespace

std::string format_access_line(const AccessRecord& r) {
  return fmt::format("{} \"{} {} HTTP/{}.{}\" {} {}B {:.3f}s", r.remote, escaped(r.method),
                     escaped(r.target), r.version / 10, r.version % 10,
                     r.status ? std::to_string(r.status) : std::string("-"), r.body_bytes,
                     r.duration_s);
}

void AccessLog::write(const AccessRecord& record) {
  const std::string line = format_access_line(record) + "\n";
  std::lock_guard lock(mutex_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

}  // namespace optimate::server
