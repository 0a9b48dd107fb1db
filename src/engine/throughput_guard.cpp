#include "engine/throughput_guard.h"

#include <fmt/format.h>

namespace optimate {

void ThroughputGuard::watch(std::vector<std::string> shapers, double min_ratio) {
  shapers_ = std::move(shapers);
  min_ratio_ = min_ratio;
  shaped_ = {};
}

void ThroughputGuard::on_step(const StepRecord& step) {
  if (min_ratio_ <= 0) return;
  const bool shaped = !shapers_.empty();
  Sum& sum = shaped ? shaped_ : baseline_;
  sum.measured_s += static_cast<double>(step.end_ns - step.start_ns) * 1e-9;
  sum.estimated_s += step.estimated_s;
  ++sum.steps;
  if (!shaped && baseline_.steps >= window_steps_) {
    baseline_ratio_ = baseline_.ratio();
    baseline_ = {};
  }
  if (shaped_.steps < window_steps_) return;
  const double ratio = shaped_.ratio() / baseline_ratio_.value_or(1.0);
  shaped_ = {};
  if (ratio >= min_ratio_) return;
  fallback_ = ThroughputFallback{
      shapers_, fmt::format("steps ran at {:.0f}% of the throughput the cost model expects, relative to the "
                            "baselines (bound {:.0f}%)", ratio * 100, min_ratio_ * 100)};
}

}  // namespace optimate
