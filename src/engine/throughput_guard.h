// The throughput guard: measured step time against a cost model's estimate of the same batch
// (bench/cost_model.h, where a profile of the backend exists). A step shaped by an optimizer
// (its KV or sampler policy) that runs slower than the model predicts, by more than the
// engine's bound relative to what the baselines achieve on the same backend, is a regression:
// the engine falls back from the optimizers filling those slots.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "runner/model_runner.h"

namespace optimate {

// Seconds the cost model expects `batch` to take.
using StepEstimator = std::function<double(const ForwardBatch& batch)>;

class ThroughputGuard {
 public:
  explicit ThroughputGuard(int64_t window_steps = 200) : window_steps_(window_steps) {}

  // A step that ran: measured and estimated seconds, and whether an optimizer shaped it.
  void on_step(double measured_s, double estimated_s, bool shaped_by_optimizer);
  // After a whole window of shaped steps: achieved / expected throughput, relative to the
  // baselines' own ratio on this backend (1 when they have not run yet); nullopt otherwise.
  std::optional<double> take_ratio();
  // Forgets the shaped window (after a fallback or a change of optimizers).
  void reset_shaped() { shaped_ = {}; }

 private:
  struct Sum {
    double measured_s = 0.0;
    double estimated_s = 0.0;
    int64_t steps = 0;
    double ratio() const { return measured_s > 0 ? estimated_s / measured_s : 1.0; }
  };
  int64_t window_steps_;
  Sum baseline_;
  Sum shaped_;
  std::optional<double> baseline_ratio_;
};

}  // namespace optimate
