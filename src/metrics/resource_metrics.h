// What the serving process uses, read at every scrape of /metrics:
//
//   process_cpu_seconds_total                         CPU time of the process (the standard series)
//   process_resident_memory_bytes                     its resident set (the standard series)
//   optimate:process_peak_resident_memory_bytes       the resident set's high-water mark
//   optimate:process_cpus                             CPUs the process may run on
//   optimate:engine_memory_bytes{model_name, device, part}   the engine's own allocations: the
//                                                     weights and the KV cache it planned, on
//                                                     its device ("cuda": GPU memory; "cpu": host)
//   optimate:gpu_utilization_percent{gpu}             NVML, where present: share of the last
//   optimate:gpu_memory_used_bytes{gpu}               sample period a kernel ran; the GPU's memory
//   optimate:gpu_memory_total_bytes{gpu}              used and total (every process's)
//
// `optimate bench --url` reads them during a run to report GPU utilization and memory, or CPU
// utilization and peak RSS, beside the latencies.
#pragma once

#include <memory>
#include <string>

#include "metrics/nvml_probe.h"
#include "metrics/registry.h"

namespace optimate::metrics {

struct EngineMemory {
  std::string device;  // "cpu" or "cuda"
  double weights_bytes = 0.0;
  double kv_cache_bytes = 0.0;
};

class ResourceMetrics {
 public:
  // Without a GPU probe (no NVML, or a CPU server) the gpu_* series are absent.
  ResourceMetrics(Registry& registry, const std::string& model_name, const EngineMemory& memory,
                  std::unique_ptr<GpuProbe> gpu);

 private:
  void collect();

  std::unique_ptr<GpuProbe> gpu_;
  Counter& cpu_seconds_;
  Gauge& resident_bytes_;
  Gauge& peak_resident_bytes_;
  Gauge& num_cpus_;
  Gauge* gpu_util_pct_ = nullptr;
  Gauge* gpu_memory_used_bytes_ = nullptr;
  Gauge* gpu_memory_total_bytes_ = nullptr;
};

}  // namespace optimate::metrics
