#include "bench/gpu_monitor.h"

namespace optimate::bench {

GpuMonitor::GpuMonitor(std::unique_ptr<GpuProbe> probe, std::string unavailable, std::chrono::milliseconds interval)
    : probe_(std::move(probe)), interval_(interval), start_(std::chrono::steady_clock::now()) {
  usage_.unavailable = std::move(unavailable);
  if (!probe_) return;
  usage_.device = probe_->device();
  thread_ = std::thread([this] { loop(); });
}

GpuMonitor::~GpuMonitor() { stop(); }

void GpuMonitor::sample() {
  const std::optional<GpuReading> r = probe_->read();
  if (!r) return;
  const double t_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  usage_.samples.push_back({t_s, r->util_pct, r->memory_used_bytes});
  usage_.memory_total_bytes = r->memory_total_bytes;
}

void GpuMonitor::loop() {
  sample();
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, interval_, [this] { return stopping_; })) {
    lock.unlock();
    sample();
    lock.lock();
  }
}

GpuUsage GpuMonitor::stop() {
  if (thread_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
    sample();  // the state at the end of the run
    if (usage_.samples.empty()) usage_.unavailable = "every NVML read of " + usage_.device + " failed";
  }
  return usage_;
}

std::unique_ptr<GpuMonitor> start_gpu_monitor() {
  NvmlOpen nvml = metrics::open_process_gpu();
  return std::make_unique<GpuMonitor>(std::move(nvml.probe), std::move(nvml.unavailable));
}

}  // namespace optimate::bench
