// Where a serving engine's time goes, as it runs: the host's wall time in each phase of a step
// (the gap since the last step, scheduling, the forward call, host sampling, the scheduler's
// update and the text outputs, the optimizers' bookkeeping), the device's busy time per step
// kind, and for every Nth step the device's time per stage of the forward pass (projections,
// attention, norms, sampling; backend/cuda/stage_timer.h). /metrics exports the totals
// (metrics/step_profile_metrics.h) and `optimate bench --url` reports them for a run.
//
// Step kinds: "decode" (every sequence runs one token) and "prefill" (at least one prompt
// chunk, with or without decodes). The device time of the stages is measured on the sampled
// steps only; scaled by steps / sampled steps it estimates every step of that kind.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "engine/step_observer.h"
#include "runner/model_runner.h"

namespace optimate {

// Totals since the engine started; plain data, safe to hand to any thread.
struct StepProfile {
  // Host wall seconds per phase: "between" (from the end of one step to the start of the next
  // while work was left: the serving loop's hand-off of outputs and new requests), "schedule",
  // "forward" (the runner's call: input copies, launches and the wait for the device),
  // "sample" (on the host), "update" (the scheduler's update, detokenization, stop strings),
  // "observe" (the controller's tick and window, the throughput guard, fallbacks). "schedule"
  // includes handing the runner the step's requantize orders and host-tier copies.
  std::map<std::string, double> phase_seconds;
  std::map<std::string, int64_t> steps;                     // per kind
  std::map<std::string, double> device_seconds;            // per kind: the device's busy time
  std::map<std::string, int64_t> staged_steps;              // per kind: steps timed by stage
  std::map<std::pair<std::string, std::string>, double> stage_seconds;  // (kind, stage)
};

// Kind of a step: "decode" when every slice runs one token without all_logits, else "prefill".
const char* step_kind(const ForwardBatch& batch);

class StepProfiler final : public StepObserver {
 public:
  // Every `stage_interval`th step is timed by stage (0: none).
  explicit StepProfiler(int64_t stage_interval = 0) : stage_interval_(stage_interval) {}

  // Whether the step about to run is one to time by stage.
  bool wants_stages() const { return stage_interval_ > 0 && num_steps_ % stage_interval_ == 0; }
  void add_phase(const char* phase, int64_t ns) { profile_.phase_seconds[phase] += static_cast<double>(ns) * 1e-9; }
  // A step that ran, with what the runner measured of it (nothing when step.device is null).
  void on_step(const StepRecord& step) override;
  const StepProfile& profile() const { return profile_; }

 private:
  int64_t stage_interval_;
  int64_t num_steps_ = 0;
  StepProfile profile_;
};

}  // namespace optimate
