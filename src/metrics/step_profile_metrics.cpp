#include "metrics/step_profile_metrics.h"

namespace optimate::metrics {
namespace {

void move_to(Counter& c, double total) {
  if (total > c.value()) c.inc(total - c.value());
}

}  // namespace

StepProfileMetrics::StepProfileMetrics(Registry& r, std::string model_name)
    : model_name_(std::move(model_name)),
      phase_seconds_(r.counter("optimate:engine_step_phase_seconds",
                               "Host wall time of the engine's steps per phase (between, schedule, forward, "
                               "sample, update, observe).",
                               {"model_name", "phase"})),
      steps_(r.counter("optimate:engine_steps", "Engine steps that ran a batch, by kind (decode, prefill).",
                       {"model_name", "kind"})),
      device_seconds_(r.counter("optimate:device_busy_seconds",
                                "Device time of the steps, from each step's first operation to its last, by kind.",
                                {"model_name", "kind"})),
      staged_steps_(r.counter("optimate:device_staged_steps",
                              "Steps timed stage by stage on the device (every --stage-profile-interval steps), "
                              "by kind.",
                              {"model_name", "kind"})),
      stage_seconds_(r.counter("optimate:device_stage_seconds",
                               "Device time per stage of the forward pass on the steps timed by stage.",
                               {"model_name", "kind", "stage"})) {
  // Every phase and kind is exported from the start, so a scrape before the first step reads 0.
  for (const char* phase : {"between", "schedule", "forward", "sample", "update", "observe"})
    phase_seconds_.labels({model_name_, phase});
  for (const char* kind : {"decode", "prefill"}) steps_.labels({model_name_, kind});
}

void StepProfileMetrics::set(const std::map<std::string, double>& phase_seconds,
                             const std::map<std::string, int64_t>& steps,
                             const std::map<std::string, double>& device_seconds,
                             const std::map<std::string, int64_t>& staged_steps,
                             const std::map<std::pair<std::string, std::string>, double>& stage_seconds) {
  for (const auto& [phase, total] : phase_seconds) move_to(phase_seconds_.labels({model_name_, phase}), total);
  for (const auto& [kind, total] : steps) move_to(steps_.labels({model_name_, kind}), static_cast<double>(total));
  for (const auto& [kind, total] : device_seconds) move_to(device_seconds_.labels({model_name_, kind}), total);
  for (const auto& [kind, total] : staged_steps)
    move_to(staged_steps_.labels({model_name_, kind}), static_cast<double>(total));
  for (const auto& [key, total] : stage_seconds)
    move_to(stage_seconds_.labels({model_name_, key.first, key.second}), total);
}

}  // namespace optimate::metrics
