#include "engine/engine.h"

namespace optimate {

EngineStats Engine::stats() const {
  EngineStats out;
  static_cast<sched::SchedulerSnapshot&>(out) = scheduler_->snapshot();
  out.optimizer_seconds = optimizers_->seconds();
  out.optimizer_fallbacks = optimizers_->fallback_counts();
  out.config_version = config_version_;
  out.step_profile = profiler_->profile();
  return out;
}

}  // namespace optimate
