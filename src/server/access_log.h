// The access log (--access-log): one line per answered request, on stderr, whatever the log
// level, so operators see who called what:
//   127.0.0.1:50312 "POST /v1/completions HTTP/1.1" 200 512B 0.031s
// The request target is written with bytes outside printable ASCII, quotes and backslashes as
// \xHH, and cut at 512 bytes, so a client cannot forge or flood log lines.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace optimate::server {

struct AccessRecord {
  std::string remote;  // "address:port"
  std::string method;  // "-" when the request line never arrived whole
  std::string target;
  unsigned version = 11;  // 10 or 11
  int status = 0;         // 0: no response was started (the client left first)
  uint64_t body_bytes = 0;
  double duration_s = 0.0;
};

std::string format_access_line(const AccessRecord& record);

class AccessLog {
 public:
  explicit AccessLog(std::FILE* out) : out_(out) {}
  void write(const AccessRecord& record);

 private:
  std::mutex mutex_;
  std::FILE* out_;
};

}  // namespace optimate::server
