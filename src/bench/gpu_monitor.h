// GPU utilization and memory during a benchmark run, sampled from a probe (NVML's,
// metrics/nvml_probe.h) on a background thread; without a probe, the reason nothing was sampled.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "bench/run_result.h"
#include "metrics/nvml_probe.h"

namespace optimate::bench {

using metrics::GpuProbe;
using metrics::GpuReading;
using metrics::GpuSelector;
using metrics::NvmlOpen;
using metrics::open_nvml;
using metrics::parse_visible_devices;

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
