// A monotonically increasing value (requests served, tokens generated). Lock-free: one atomic
// add per increment, so the engine loop can count without contention.
#pragma once

#include <atomic>

namespace optimate::metrics {

class Counter {
 public:
  // Negative increments are ignored: a counter that goes down breaks rate() in every scraper.
  void inc(double amount = 1.0) {
    if (amount > 0.0) value_.fetch_add(amount, std::memory_order_relaxed);
  }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

}  // namespace optimate::metrics
