#include "bench/progress.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace optimate::bench {

ProgressBar::ProgressBar(std::string label) : label_(std::move(label)), enabled_(isatty(STDERR_FILENO) != 0) {}

ProgressBar::~ProgressBar() {
  if (drawn_) std::fputs("\n", stderr);
}

void ProgressBar::update(int64_t done, int64_t total, double run_s) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total && drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  draw(done, total, run_s);
}

void ProgressBar::draw(int64_t done, int64_t total, double run_s) {
  constexpr int kWidth = 30;
  const int filled = total > 0 ? static_cast<int>(kWidth * done / total) : kWidth;
  std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '-');
  std::fputs(fmt::format("\r{:<12} [{}] {}/{} requests  t={:.1f}s", label_, bar, done, total, run_s).c_str(), stderr);
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace optimate::bench
