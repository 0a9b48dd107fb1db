// The throughput guard: measured step time against a cost model's estimate of the same batch
// (bench/cost_model.h, where a profile of the backend exists). A step shaped by an optimizer
// (its KV or sampler policy) that runs slower than the model predicts, by more than the
// engine's bound relative to what the baselines achieve on the same backend, is a regression:
// the engine falls back from the optimizers filling those slots.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/step_observer.h"
#include "runner/model_runner.h"

namespace optimate {

// Seconds the cost model expects `batch` to take.
using StepEstimator = std::function<double(const ForwardBatch& batch)>;

// The optimizers to fall back from, and why.
struct ThroughputFallback {
  std::vector<std::string> optimizers;
  std::string detail;
};

class ThroughputGuard final : public StepObserver {
 public:
  explicit ThroughputGuard(int64_t window_steps = 200) : window_steps_(window_steps) {}

  // What the steps from now on are held to: `shapers`, the optimizers that shape them (none:
  // the steps are the baselines'), and `min_ratio`, the bound on their throughput relative to
  // the baselines' (0: off). Forgets the shaped window (after a fallback or a change of
  // optimizers).
  void watch(std::vector<std::string> shapers, double min_ratio);
  // Measured against estimated seconds; after a whole window of shaped steps, their achieved /
  // expected throughput relative to the baselines' own ratio on this backend (1 when they have
  // not run yet) below the bound calls for a fallback.
  void on_step(const StepRecord& step) override;
  // The fallback the last step called for, once; nullopt when none.
  std::optional<ThroughputFallback> take_fallback() { return std::exchange(fallback_, std::nullopt); }

 private:
  struct Sum {
    double measured_s = 0.0;
    double estimated_s = 0.0;
    int64_t steps = 0;
    double ratio() const { return measured_s > 0 ? estimated_s / measured_s : 1.0; }
  };
  int64_t window_steps_;
  std::vector<std::string> shapers_;
  double min_ratio_ = 0.0;
  Sum baseline_;
  Sum shaped_;
  std::optional<double> baseline_ratio_;
  std::optional<ThroughputFallback> fallback_;
};

}  // namespace optimate
