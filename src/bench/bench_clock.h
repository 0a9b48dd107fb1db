// The clock of the benchmark's HTTP client: the steady clock, plus whatever `skip` added.
// Arrival times, think times and request timeouts are timers on it, so a test makes them pass
// by skipping the clock forward instead of waiting; nothing else skips it.
//
// A timer on it sleeps in slices of at most kBenchClockSlice and looks at the clock again after
// each, so a skip is seen within one slice.
#pragma once

#include <algorithm>
#include <chrono>

#include <boost/asio/basic_waitable_timer.hpp>

namespace optimate::bench {

struct BenchClock {
  using duration = std::chrono::steady_clock::duration;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<BenchClock>;
  static constexpr bool is_steady = true;

  static time_point now() noexcept;
  // Moves the clock forward by `d` (>= 0) for every timer and reading from now on.
  static void skip(duration d) noexcept;
};

inline constexpr BenchClock::duration kBenchClockSlice = std::chrono::milliseconds(20);

struct BenchClockWaitTraits {
  static BenchClock::duration to_wait_duration(const BenchClock::duration& d) {
    return std::min(d, kBenchClockSlice);
  }
  static BenchClock::duration to_wait_duration(const BenchClock::time_point& t) {
    return to_wait_duration(t - BenchClock::now());
  }
};

using BenchTimer = boost::asio::basic_waitable_timer<BenchClock, BenchClockWaitTraits>;

// Seconds as the clock's duration.
inline BenchClock::duration bench_seconds(double s) {
  return std::chrono::duration_cast<BenchClock::duration>(std::chrono::duration<double>(s));
}

}  // namespace optimate::bench
