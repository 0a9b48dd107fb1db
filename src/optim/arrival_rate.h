// Exponentially weighted arrival rate: each arrival adds 1 to a count that decays with time
// constant `window`; rate = count / window. Recent arrivals dominate, and a quiet spell decays
// the estimate without any new event.
#pragma once

#include <cmath>
#include <cstdint>

namespace optimate::optim {

class ArrivalRateEstimator {
 public:
  explicit ArrivalRateEstimator(double window_ms) : window_ns_(window_ms * 1e6) {}

  void observe(int64_t t_ns) {
    if (has_last_ && t_ns > last_ns_) {
      count_ *= std::exp(-static_cast<double>(t_ns - last_ns_) / window_ns_);
      last_ns_ = t_ns;
    } else if (!has_last_) {
      last_ns_ = t_ns;
      has_last_ = true;
    }
    count_ += 1.0;  // an arrival stamped before the last one counts without rewinding time
  }

  double rate_per_s(int64_t now_ns) const {
    if (!has_last_) return 0.0;
    const double decay = now_ns > last_ns_ ? std::exp(-static_cast<double>(now_ns - last_ns_) / window_ns_) : 1.0;
    return count_ * decay / (window_ns_ * 1e-9);
  }

 private:
  double window_ns_;
  double count_ = 0.0;
  int64_t last_ns_ = 0;
  bool has_last_ = false;
};

}  // namespace optimate::optim
