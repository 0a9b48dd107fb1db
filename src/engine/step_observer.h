// What the engine tells its observers after each step (the step profiler, the controller's
// metrics window, the throughput guard): one record of the step, handed to each in turn.
// A step is observed once its tokens are known: at once for a step run alone, one step later
// for an overlapped one.
#pragma once

#include <cstdint>
#include <span>

#include "runner/model_runner.h"
#include "sched/request_output.h"

namespace optimate {

struct StepRecord {
  const char* kind = "";  // step_kind(): "decode" or "prefill"
  // Engine clock. From when the device could start the step (its schedule, or the collect of
  // the step before it) to when its tokens were known (a step run alone: after its update).
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  double estimated_s = 0.0;   // the cost model's time for the batch; 0 without one
  int64_t prompt_tokens = 0;  // prompt tokens it computed (cached prefixes excluded)
  std::span<const sched::RequestOutput> outputs;  // what the scheduler's update produced
  const StepDeviceTimes* device = nullptr;        // what the runner measured; null: nothing
};

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void on_step(const StepRecord& step) = 0;
};

}  // namespace optimate
