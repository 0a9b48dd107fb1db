// A value that goes up and down (running requests, KV usage). Lock-free.
#pragma once

#include <atomic>

namespace optimate::metrics {

class Gauge {
 public:
  void set(double value) { value_.store(value, std::memory_order_relaxed); }
  void inc(double amount = 1.0) { value_.fetch_add(amount, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

}  // namespace optimate::metrics
