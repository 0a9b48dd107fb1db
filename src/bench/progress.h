// A one-line progress bar on stderr, redrawn at most ten times a second, shown only when
// stderr is a terminal (logs and CI output stay clean).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace optimate::bench {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  ~ProgressBar();
  void update(int64_t done, int64_t total, double run_s);

 private:
  void draw(int64_t done, int64_t total, double run_s);
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace optimate::bench
