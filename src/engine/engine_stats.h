// A snapshot of the engine's state and running totals, for /metrics, queue limits and load
// reports. Taken on the engine's thread between steps (Engine::stats()); plain data, safe to
// hand to any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "engine/step_profile.h"
#include "sched/scheduler_snapshot.h"

namespace optimate {

// The scheduler's snapshot and the optimizers' totals.
struct EngineStats : sched::SchedulerSnapshot {
  // Seconds inside each optimizer's (and baseline's) policies since the start.
  std::map<std::string, double> optimizer_seconds;
  // Fallbacks since the start, per (optimizer, reason).
  std::map<std::pair<std::string, std::string>, int64_t> optimizer_fallbacks;
  int64_t config_version = 1;  // the active configuration's version
  StepProfile step_profile;     // where the steps' time went (engine/step_profile.h)
};

}  // namespace optimate
