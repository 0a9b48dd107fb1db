#include "metrics/histogram.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace optimate::metrics {

void check_bucket_bounds(const std::vector<double>& bounds, const char* name) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]))
      fail(ErrorCode::kInvalidArgument, "histogram {}: bucket bound {} is not finite", name, i);
    if (i > 0 && bounds[i] <= bounds[i - 1])
      fail(ErrorCode::kInvalidArgument, "histogram {}: bucket bounds must increase ({} <= {})",
           name, bounds[i], bounds[i - 1]);
  }
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  check_bucket_bounds(bounds_, "(unnamed)");
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double value) {
  if (std::isnan(value)) return;  // a NaN would poison _sum forever
  // `le` is inclusive: the first bound >= value.
  size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot snap;
  snap.cumulative_counts.resize(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    snap.cumulative_counts[i] = running;
  }
  snap.sum = sum_.load(std::memory_order_relaxed);
  return snap;
}

std::vector<double> buckets_1_2_5(double max_value) {
  std::vector<double> out;
  for (double scale = 1.0;; scale *= 10.0) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * scale > max_value) return out;
      out.push_back(m * scale);
    }
  }
}

}  // namespace optimate::metrics
