#include "bench/bench_clock.h"

#include <atomic>

namespace optimate::bench {
namespace {

std::atomic<BenchClock::rep> skipped{0};

}  // namespace

BenchClock::time_point BenchClock::now() noexcept {
  const auto steady = std::chrono::steady_clock::now().time_since_epoch();
  return time_point(steady + duration(skipped.load(std::memory_order_acquire)));
}

void BenchClock::skip(duration d) noexcept {
  if (d > duration::zero()) skipped.fetch_add(d.count(), std::memory_order_acq_rel);
}

}  // namespace optimate::bench
