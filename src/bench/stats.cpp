#include "bench/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace optimate::bench {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double sorted_percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return kNaN;
  if (!(p >= 0.0 && p <= 100.0)) fail(ErrorCode::kInvalidArgument, "percentile {} is outside [0, 100]", p);
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + frac * (sorted[hi] - sorted[lo]);
}

}  // namespace

double percentile(std::span<const double> values, double p) {
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted_percentile(sorted, p);
}

SampleStats sample_stats(std::span<const double> values) {
  SampleStats s;
  s.count = static_cast<int64_t>(values.size());
  if (values.empty()) {
    s.mean = s.std = s.median = s.p95 = s.p99 = s.max = kNaN;
    return s;
  }
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  double sum = 0.0;
  for (double v : sorted) sum += v;
  s.mean = sum / static_cast<double>(sorted.size());
  double sq = 0.0;
  for (double v : sorted) sq += (v - s.mean) * (v - s.mean);
  s.std = std::sqrt(sq / static_cast<double>(sorted.size()));
  s.median = sorted_percentile(sorted, 50.0);
  s.p95 = sorted_percentile(sorted, 95.0);
  s.p99 = sorted_percentile(sorted, 99.0);
  s.max = sorted.back();
  return s;
}

}  // namespace optimate::bench
