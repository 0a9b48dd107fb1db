#include "engine/step_profile.h"

namespace optimate {

const char* step_kind(const ForwardBatch& batch) {
  for (const SeqSlice& s : batch.seqs)
    if (s.token_ids.size() != 1 || s.all_logits) return "prefill";
  return "decode";
}

void StepProfiler::on_step(const char* kind, const StepDeviceTimes* device) {
  ++num_steps_;
  ++profile_.steps[kind];
  if (!device) return;
  profile_.device_seconds[kind] += device->busy_s;
  if (device->stages.empty()) return;
  ++profile_.staged_steps[kind];
  for (const auto& [stage, seconds] : device->stages) profile_.stage_seconds[{kind, stage}] += seconds;
}

}  // namespace optimate
