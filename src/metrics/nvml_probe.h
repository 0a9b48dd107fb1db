// One GPU's utilization and memory through NVML. libnvidia-ml is opened at run time (dlopen), so
// builds need no NVIDIA headers or libraries and a machine without a GPU just reports why there
// is no probe. The server exports the readings in /metrics (resource_metrics.h) and the
// benchmark samples them during in-process runs (bench/gpu_monitor.h).
#pragma once

#include <memory>
#include <optional>
#include <string>

namespace optimate::metrics {

struct GpuReading {
  double util_pct = 0.0;  // share of the last sample period a kernel ran, 0..100
  double memory_used_bytes = 0.0;
  double memory_total_bytes = 0.0;
};

// One GPU's counters; NVML's in production, a fake in tests.
class GpuProbe {
 public:
  virtual ~GpuProbe() = default;
  virtual std::string device() const = 0;
  virtual std::optional<GpuReading> read() = 0;  // nullopt: this read failed
};

// Which GPU this process uses, from CUDA_VISIBLE_DEVICES' first entry: an index ("1,2" -> 1)
// or a UUID ("GPU-8a5e..."); unset means index 0. NVML numbers devices as the driver does,
// ignoring CUDA_VISIBLE_DEVICES, hence the translation.
struct GpuSelector {
  bool none = false;  // CUDA_VISIBLE_DEVICES hides every GPU ("" or "-1")
  unsigned index = 0;
  std::string uuid;  // set: select by UUID instead of index
};
GpuSelector parse_visible_devices(const char* cuda_visible_devices);

struct NvmlOpen {
  std::unique_ptr<GpuProbe> probe;
  std::string unavailable;  // why there is no probe
};
// Loads `library`, initializes NVML and opens the selected device.
NvmlOpen open_nvml(const GpuSelector& selector, const std::string& library = "libnvidia-ml.so.1");
// The GPU this process uses (CUDA_VISIBLE_DEVICES), or why there is none.
NvmlOpen open_process_gpu();

}  // namespace optimate::metrics
