// Descriptive statistics over latency samples, with numpy's conventions so numbers match
// `vllm bench serve` (which calls np.mean / np.median / np.std / np.percentile).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace optimate::bench {

// The p-th percentile (0 <= p <= 100) of `values` by numpy's default "linear" rule: sort, take
// the fractional rank r = p/100 * (n - 1), and interpolate between the neighbours floor(r) and
// ceil(r): v[i] + (r - i) * (v[i+1] - v[i]). NaN for an empty sample.
double percentile(std::span<const double> values, double p);

struct SampleStats {
  int64_t count = 0;
  double mean = 0.0;
  double std = 0.0;  // population standard deviation (numpy's default ddof = 0)
  double median = 0.0;
  double p95 = 0.0;
  double p99 = 0.0;
  double max = 0.0;
};

// Every field NaN (count 0) for an empty sample: a report shows "n/a", never a fake zero.
SampleStats sample_stats(std::span<const double> values);

}  // namespace optimate::bench
