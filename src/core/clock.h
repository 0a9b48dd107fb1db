// Time source injected into everything that reads time, so policies test with a fake clock.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

namespace optimate {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time in nanoseconds since an arbitrary origin.
  virtual int64_t now_ns() const = 0;
  double now_s() const { return static_cast<double>(now_ns()) * 1e-9; }
  // Blocks on `cv` (its `lock` held) until `wake()` holds or this clock reaches `deadline_ns`.
  // A clock of real time waits that long; a fake one waits for its time to be moved.
  virtual void wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, int64_t deadline_ns,
                          const std::function<bool()>& wake) const {
    const int64_t wait_ns = deadline_ns - now_ns();
    if (wait_ns > 0) cv.wait_for(lock, std::chrono::nanoseconds(wait_ns), wake);
  }
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
  // Its time moves only when it is moved: the wait looks again every millisecond (of real time)
  // whether it was, or whether `wake()` holds. A test sees how many waits began and the deadline
  // of the one under way (-1: none).
  void wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, int64_t deadline_ns,
                  const std::function<bool()>& wake) const override {
    waiting_until_ns_ = deadline_ns;
    ++num_waits_;
    while (!wake() && now_ns() < deadline_ns) cv.wait_for(lock, std::chrono::milliseconds(1));
    waiting_until_ns_ = -1;
  }
  int64_t num_waits() const { return num_waits_.load(); }
  int64_t waiting_until_ns() const { return waiting_until_ns_.load(); }

 private:
  std::atomic<int64_t> now_ns_;
  mutable std::atomic<int64_t> num_waits_{0};
  mutable std::atomic<int64_t> waiting_until_ns_{-1};
};

}  // namespace optimate
