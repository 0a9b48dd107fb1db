// The process's own CPU time and memory: what /metrics exports as the standard process_*
// series (resource_metrics.h) and what the benchmark reports for the runs in its own process.
#pragma once

#include <cstdint>
#include <optional>

namespace optimate::metrics {

struct ProcessUsage {
  double cpu_seconds = 0.0;          // user + system time since the process started
  double resident_bytes = 0.0;       // resident set now
  double peak_resident_bytes = 0.0;  // its high-water mark (VmHWM), since start or the last reset
  int64_t num_cpus = 0;              // CPUs the process may run on (its affinity mask)
};

// Reads them from the kernel (getrusage, /proc/self); nullopt where /proc cannot be read.
std::optional<ProcessUsage> read_process_usage();

// Restarts the peak's count from the current resident set (Linux: /proc/self/clear_refs), so
// a run's peak excludes what came before it; false where the kernel does not allow it.
bool reset_peak_resident();

}  // namespace optimate::metrics
