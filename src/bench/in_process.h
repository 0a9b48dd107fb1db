// Drives one engine through a workload in the benchmark's own thread: sends each request at
// its arrival time (or keeps `concurrency` in flight for a closed loop), steps the engine,
// and records when every token came out. On a fake clock (the simulated backend) idle time is
// skipped instead of slept, so a simulated hour takes seconds.
#pragma once

#include <functional>

#include "bench/bench_target.h"
#include "bench/run_result.h"
#include "bench/workload.h"

namespace optimate::bench {

// Called after each step with (finished requests, all requests, run time in seconds).
using ProgressFn = std::function<void(int64_t, int64_t, double)>;

RunResult run_in_process(BuiltEngine& target, const Workload& workload, const ProgressFn& progress = {});

}  // namespace optimate::bench
