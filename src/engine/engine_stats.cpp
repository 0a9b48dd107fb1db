#include "engine/engine.h"

namespace optimate {

EngineStats Engine::stats() const {
  EngineStats out;
  static_cast<sched::SchedulerSnapshot&>(out) = scheduler_->snapshot();
  std::map<int64_t, int64_t> by_client;
  for (const auto& [priority, count] : out.num_waiting_by_priority)
    by_client[to_client_priority(config_.priority_order, priority)] += count;
  out.num_waiting_by_priority = std::move(by_client);
  out.optimizer_seconds = optimizers_->seconds();
  out.optimizer_fallbacks = optimizers_->fallback_counts();
  out.config_version = config_version_;
  out.step_profile = profiler_.profile();
  return out;
}

}  // namespace optimate
