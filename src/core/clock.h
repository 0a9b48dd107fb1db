// Time source injected into everything that reads time, so policies test with a fake clock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace optimate {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time in nanoseconds since an arbitrary origin.
  virtual int64_t now_ns() const = 0;
  double now_s() const { return static_cast<double>(now_ns()) * 1e-9; }
};

class SteadyClock final : public Clock {
 public:
  int64_t now_ns() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

// A clock that moves only when told to; thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_ns = 0) : now_ns_(start_ns) {}
  int64_t now_ns() const override { return now_ns_.load(); }
  void advance_ns(int64_t delta_ns) { now_ns_ += delta_ns; }
  void advance_ms(double delta_ms) { now_ns_ += static_cast<int64_t>(delta_ms * 1e6); }
  void set_ns(int64_t t_ns) { now_ns_ = t_ns; }

 private:
  std::atomic<int64_t> now_ns_;
};

}  // namespace optimate
