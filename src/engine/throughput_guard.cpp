#include "engine/throughput_guard.h"

namespace optimate {

void ThroughputGuard::on_step(double measured_s, double estimated_s, bool shaped_by_optimizer) {
  Sum& sum = shaped_by_optimizer ? shaped_ : baseline_;
  sum.measured_s += measured_s;
  sum.estimated_s += estimated_s;
  ++sum.steps;
  if (!shaped_by_optimizer && baseline_.steps >= window_steps_) {
    baseline_ratio_ = baseline_.ratio();
    baseline_ = {};
  }
}

std::optional<double> ThroughputGuard::take_ratio() {
  if (shaped_.steps < window_steps_) return std::nullopt;
  const double ratio = shaped_.ratio() / baseline_ratio_.value_or(1.0);
  shaped_ = {};
  return ratio;
}

}  // namespace optimate
