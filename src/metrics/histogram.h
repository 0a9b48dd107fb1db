// A cumulative histogram with fixed upper bounds (Prometheus `le` buckets), lock-free.
//
// observe() does one binary search and two atomic adds. A scrape reads the buckets while
// observations continue; the exported _count is derived from the bucket counts, so the
// `le="+Inf"` bucket always equals _count as the format requires.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace optimate::metrics {

class Histogram {
 public:
  // Bounds must be finite and strictly increasing; the +Inf bucket is implicit.
  explicit Histogram(std::vector<double> upper_bounds);

  void observe(double value);

  struct Snapshot {
    std::vector<uint64_t> cumulative_counts;  // one per bound, then the +Inf bucket
    double sum = 0.0;
    uint64_t count() const { return cumulative_counts.back(); }
  };
  Snapshot snapshot() const;
  const std::vector<double>& upper_bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, not cumulative
  std::atomic<double> sum_{0.0};
};

// Validates bounds for a histogram named `name`; throws Error(kInvalidArgument) naming it.
void check_bucket_bounds(const std::vector<double>& bounds, const char* name);

// 1, 2, 5, 10, 20, 50, ... up to and including `max_value` (vLLM's token-count buckets).
std::vector<double> buckets_1_2_5(double max_value);

}  // namespace optimate::metrics
