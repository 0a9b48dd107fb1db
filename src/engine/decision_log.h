// The decision log (--decision-log FILE): one JSON object per line for every decision a user
// may want explained — an admission out of arrival order, a preemption, a batch hold, a
// controller action, a fallback, a rollback, a configuration change — each with the reason
// and the figures behind it. The schema is in docs/optimizers.md ("Decision log").
//
// Every record has "t_s" (engine clock, seconds), "event", "optimizer" (whose decision; "engine"
// for the engine's own) and "reason"; the other fields depend on the event.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace optimate {

using DecisionValue = std::variant<bool, int64_t, double, std::string>;

struct DecisionRecord {
  double t_s = 0.0;
  std::string event;
  std::string optimizer;
  std::string reason;
  std::vector<std::pair<std::string, DecisionValue>> fields;
  // Nested numeric figures ("figures": {...}), e.g. the signals a controller acted on.
  std::vector<std::pair<std::string, double>> figures;

  DecisionRecord& with(std::string key, DecisionValue value) {
    fields.emplace_back(std::move(key), std::move(value));
    return *this;
  }
};

class DecisionLog {
 public:
  using Writer = std::function<void(std::string_view line)>;
  // `writer` receives each record as one line of JSON without the newline.
  explicit DecisionLog(Writer writer) : writer_(std::move(writer)) {}
  // Appends to `path`, flushing every record so a crash loses nothing; Error(kNotFound) naming
  // the path when it cannot be opened.
  static std::shared_ptr<DecisionLog> open_file(const std::string& path);

  void write(const DecisionRecord& record);

 private:
  std::mutex mu_;
  Writer writer_;
};

// The record as its JSON line.
std::string decision_json(const DecisionRecord& record);

// A writer of lines to `path` (appended, or the file truncated first), flushed line by line;
// Error(kNotFound) naming the path and `what` it is for when it cannot be opened.
std::function<void(std::string_view line)> open_line_file(const std::string& path, bool append,
                                                          std::string_view what);

}  // namespace optimate
