#include "engine/step_profile.h"

namespace optimate {

const char* step_kind(const ForwardBatch& batch) {
  for (const SeqSlice& s : batch.seqs)
    if (s.token_ids.size() != 1 || s.all_logits) return "prefill";
  return "decode";
}

void StepProfiler::on_step(const StepRecord& step) {
  ++num_steps_;
  ++profile_.steps[step.kind];
  if (!step.device) return;
  profile_.device_seconds[step.kind] += step.device->busy_s;
  if (step.device->stages.empty()) return;
  ++profile_.staged_steps[step.kind];
  for (const auto& [stage, seconds] : step.device->stages) profile_.stage_seconds[{step.kind, stage}] += seconds;
}

}  // namespace optimate
