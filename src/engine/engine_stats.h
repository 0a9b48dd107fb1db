// A snapshot of the engine's state and running totals, for /metrics, queue limits and load
// reports. Taken on the engine's thread between steps (Engine::stats()); plain data, safe to
// hand to any thread.
#pragma once

#include "sched/scheduler_snapshot.h"

namespace optimate {

// The scheduler's snapshot, with num_waiting_by_priority keyed by the clients' priority
// values (--priority-order).
using EngineStats = sched::SchedulerSnapshot;

}  // namespace optimate
