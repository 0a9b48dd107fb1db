// GPU utilization and memory during a benchmark run, read through NVML. libnvidia-ml is opened
// at run time (dlopen), so builds need no NVIDIA headers or libraries and a machine without a
// GPU just reports why nothing was sampled.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "bench/run_result.h"

namespace optimate::bench {

struct GpuReading {
  double util_pct = 0.0;
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

// Reads the probe on a background thread every `interval` (once at start, once at stop) until
// stop(), which returns the samples. Without a probe, stop() returns the reason.
class GpuMonitor {
 public:
  GpuMonitor(std::unique_ptr<GpuProbe> probe, std::string unavailable,
             std::chrono::milliseconds interval = std::chrono::milliseconds(100));
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;
  GpuUsage stop();

 private:
  void sample();
  void loop();

  std::unique_ptr<GpuProbe> probe_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point start_;
  GpuUsage usage_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

// A monitor on this process's GPU (NVML, CUDA_VISIBLE_DEVICES), or one that records why none.
std::unique_ptr<GpuMonitor> start_gpu_monitor();

}  // namespace optimate::bench
