// What an Optimate server's /metrics says of the resources it uses (metrics/resource_metrics.h):
// read before, during (HttpTargetOptions::resource_poll_ms) and after an `optimate bench --url`
// run, and turned into the run's GPU and host usage.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/run_result.h"

namespace optimate::bench {

struct ServerResources {
  bool found = false;  // the process and engine series exist (an Optimate server)
  std::string device;  // the engine's: "cpu" or "cuda"
  double engine_memory_bytes = 0.0;
  double device_busy_seconds = 0.0;
  double cpu_seconds = 0.0;
  double resident_bytes = 0.0;
  double peak_resident_bytes = 0.0;
  int64_t num_cpus = 0;
  // NVML's, when the server reads a GPU.
  std::string gpu;
  std::optional<double> gpu_util_pct;
  std::optional<double> gpu_memory_used_bytes;
  double gpu_memory_total_bytes = 0.0;
};

ServerResources parse_server_resources(std::string_view metrics_text);

// One scrape during the run, `t_s` from its start.
struct ResourceScrape {
  double t_s = 0.0;
  ServerResources resources;
};

// The run's GPU usage and the server process's host usage from the scrapes before and after it
// and those between (their order); `wall_s` is the run's length. A server without the series
// gives usages whose `unavailable` says so.
void server_usage(const ServerResources& before, const std::vector<ResourceScrape>& during,
                  const ServerResources& after, double wall_s, GpuUsage& gpu, HostUsage& host);

}  // namespace optimate::bench
