#include "engine/trace_recorder.h"

#include <fmt/format.h>

#include "engine/decision_log.h"

namespace optimate {

std::shared_ptr<TraceRecorder> TraceRecorder::open_file(const std::string& path) {
  return std::make_shared<TraceRecorder>(open_line_file(path, /*append=*/false, "trace file"));
}

void TraceRecorder::record(int64_t arrival_ns, int64_t prompt_len, int64_t max_tokens, int64_t priority) {
  std::lock_guard lock(mu_);
  if (first_ns_ < 0) first_ns_ = arrival_ns;
  const double arrival_s = static_cast<double>(arrival_ns - first_ns_) * 1e-9;
  writer_(fmt::format(R"({{"arrival_s": {:.6f}, "prompt_len": {}, "max_tokens": {}, "priority": {}}})",
                      arrival_s < 0 ? 0.0 : arrival_s, prompt_len, max_tokens, priority));
}

}  // namespace optimate
