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
  // An event (its line being read and its data so far) past `max_event_bytes` stops the parser:
  // a server that sends one endless line must not take the client's memory with it.
  explicit SseParser(size_t max_event_bytes = size_t{256} << 20) : max_event_bytes_(max_event_bytes) {}
  // Consumes bytes as they arrive; returns the data of every event they complete, in order;
  // nothing more once overflowed().
  std::vector<std::string> feed(std::string_view bytes);
  // True while an event has started but not ended (a stream cut here lost that event).
  bool mid_event() const { return !line_.empty() || has_data_; }
  bool overflowed() const { return overflowed_; }
  size_t max_event_bytes() const { return max_event_bytes_; }

 private:
  void end_line(std::vector<std::string>& events);

  std::string line_;
  std::string data_;
  bool has_data_ = false;
  bool after_cr_ = false;  // the last byte was '\r': a following '\n' belongs to the same break
  size_t max_event_bytes_;
  bool overflowed_ = false;
};

}  // namespace optimate::bench
