#include "bench/server_resources.h"

#include <algorithm>
#include <map>

#include "bench/metrics_text.h"

namespace optimate::bench {

ServerResources parse_server_resources(std::string_view text) {
  ServerResources r;
  bool process = false, engine = false;
  for_each_metric_sample(text, [&](const std::string& name, const std::map<std::string, std::string>& labels,
                                   double value) {
    auto label = [&](const char* key) {
      const auto it = labels.find(key);
      return it == labels.end() ? std::string() : it->second;
    };
    if (name == "process_cpu_seconds_total") {
      r.cpu_seconds = value;
      process = true;
    } else if (name == "process_resident_memory_bytes") {
      r.resident_bytes = value;
    } else if (name == "optimate:process_peak_resident_memory_bytes") {
      r.peak_resident_bytes = value;
    } else if (name == "optimate:process_cpus") {
      r.num_cpus = static_cast<int64_t>(value);
    } else if (name == "optimate:engine_memory_bytes") {
      r.engine_memory_bytes += value;
      r.device = label("device");
      engine = true;
    } else if (name == "optimate:device_busy_seconds_total") {
      r.device_busy_seconds += value;
    } else if (name == "optimate:gpu_utilization_percent") {
      r.gpu_util_pct = value;
      r.gpu = label("gpu");
    } else if (name == "optimate:gpu_memory_used_bytes") {
      r.gpu_memory_used_bytes = value;
    } else if (name == "optimate:gpu_memory_total_bytes") {
      r.gpu_memory_total_bytes = value;
    }
  });
  r.found = process && engine;
  return r;
}

void server_usage(const ServerResources& before, const std::vector<ResourceScrape>& during,
                  const ServerResources& after, double wall_s, GpuUsage& gpu, HostUsage& host) {
  if (!before.found || !after.found) {
    host.unavailable = gpu.unavailable =
        "the server's /metrics has no process and engine series (not an Optimate server, or an older one)";
    return;
  }
  host.cpu_seconds = after.cpu_seconds - before.cpu_seconds;
  host.wall_s = wall_s;
  host.num_cpus = after.num_cpus;
  // The high-water mark, when the run raised it; else the most the scrapes saw resident.
  double peak = std::max(before.resident_bytes, after.resident_bytes);
  for (const ResourceScrape& s : during) peak = std::max(peak, s.resources.resident_bytes);
  host.peak_resident_bytes = after.peak_resident_bytes > before.peak_resident_bytes ? after.peak_resident_bytes : peak;

  if (after.device != "cuda") {
    gpu.unavailable = "the server runs on the " + (after.device.empty() ? std::string("cpu") : after.device);
    return;
  }
  gpu.engine_memory_bytes = after.engine_memory_bytes;
  if (wall_s > 0) gpu.engine_busy_pct = 100.0 * (after.device_busy_seconds - before.device_busy_seconds) / wall_s;
  for (const ResourceScrape& s : during)
    if (s.resources.gpu_util_pct) {
      gpu.samples.push_back({s.t_s, *s.resources.gpu_util_pct, s.resources.gpu_memory_used_bytes.value_or(0.0)});
      gpu.device = s.resources.gpu + " (the server's NVML)";
      gpu.memory_total_bytes = s.resources.gpu_memory_total_bytes;
    }
  if (gpu.samples.empty())
    gpu.unavailable = "the server reads no NVML: its engine's busy time and allocations instead";
}

}  // namespace optimate::bench
