#include "bench/sse_parser.h"

namespace optimate::bench {

std::vector<std::string> SseParser::feed(std::string_view bytes) {
  std::vector<std::string> events;
  for (char c : bytes) {
    if (overflowed_) break;
    if (c == '\n' && after_cr_) {
      after_cr_ = false;
      continue;
    }
    after_cr_ = c == '\r';
    if (c == '\n' || c == '\r') {
      end_line(events);
    } else {
      line_ += c;
      if (line_.size() + data_.size() > max_event_bytes_) overflowed_ = true;
    }
  }
  return events;
}

void SseParser::end_line(std::vector<std::string>& events) {
  if (line_.empty()) {
    if (has_data_) events.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line_.front() != ':') {
    const size_t colon = line_.find(':');
    std::string_view field(line_.data(), colon == std::string::npos ? line_.size() : colon);
    if (field == "data") {
      std::string_view value;
      if (colon != std::string::npos) value = std::string_view(line_).substr(colon + 1);
      if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      if (has_data_) data_ += '\n';
      data_ += value;
      has_data_ = true;
    }
  }
  line_.clear();
}

}  // namespace optimate::bench
