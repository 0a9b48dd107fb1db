// Splits a text/event-stream body into events, as OpenAI-compatible servers stream them.
//
// The WHATWG rules a benchmark client needs: a line ends in "\n", "\r\n" or "\r" (possibly split
// across reads); "data:" lines of one event are joined with "\n" (one space after the colon is
// dropped); a blank line ends the event; lines starting with ':' are comments; other fields
// (event, id, retry) carry nothing a completion stream uses and are skipped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace optimate::bench {

class SseParser {
 public:
  // Consumes bytes as they arrive; returns the data of every event they complete, in order.
  std::vector<std::string> feed(std::string_view bytes);
  // True while an event has started but not ended (a stream cut here lost that event).
  bool mid_event() const { return !line_.empty() || has_data_; }

 private:
  void end_line(std::vector<std::string>& events);

  std::string line_;
  std::string data_;
  bool has_data_ = false;
  bool after_cr_ = false;  // the last byte was '\r': a following '\n' belongs to the same break
};

}  // namespace optimate::bench
