// `optimate serve --record-trace FILE`: every request's arrival, lengths and priority, and no
// text, as JSON Lines in the plain trace format `optimate bench` and `optimate advise` read
// (bench/trace.h): {"arrival_s", "prompt_len", "max_tokens", "priority"}. Arrival times count
// from the first recorded request; priorities are the clients' values, as sent.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace optimate {

class TraceRecorder {
 public:
  using Writer = std::function<void(std::string_view line)>;
  explicit TraceRecorder(Writer writer) : writer_(std::move(writer)) {}
  // Truncates `path`; Error(kNotFound) naming it when it cannot be opened.
  static std::shared_ptr<TraceRecorder> open_file(const std::string& path);

  void record(int64_t arrival_ns, int64_t prompt_len, int64_t max_tokens, int64_t priority);

 private:
  std::mutex mu_;
  Writer writer_;
  int64_t first_ns_ = -1;
};

}  // namespace optimate
