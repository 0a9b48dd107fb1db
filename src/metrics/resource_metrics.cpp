#include "metrics/resource_metrics.h"

#include "metrics/process_usage.h"

namespace optimate::metrics {

ResourceMetrics::ResourceMetrics(Registry& r, const std::string& model_name, const EngineMemory& memory,
                                 std::unique_ptr<GpuProbe> gpu)
    : gpu_(std::move(gpu)),
      cpu_seconds_(r.counter("process_cpu_seconds", "Total user and system CPU time spent in seconds.").labels({})),
      resident_bytes_(r.gauge("process_resident_memory_bytes", "Resident memory size in bytes.").labels({})),
      peak_resident_bytes_(r.gauge("optimate:process_peak_resident_memory_bytes",
                                   "Highest resident memory size of the process so far, in bytes.")
                               .labels({})),
      num_cpus_(r.gauge("optimate:process_cpus", "CPUs the process may run on.").labels({})) {
  Family<Gauge>& engine_memory = r.gauge("optimate:engine_memory_bytes",
                                         "Memory the engine allocated on its device, by part (weights, kv_cache).",
                                         {"model_name", "device", "part"});
  engine_memory.labels({model_name, memory.device, "weights"}).set(memory.weights_bytes);
  engine_memory.labels({model_name, memory.device, "kv_cache"}).set(memory.kv_cache_bytes);
  if (gpu_) {
    const std::string device = gpu_->device();
    gpu_util_pct_ = &r.gauge("optimate:gpu_utilization_percent",
                             "NVML: share of the last sample period a kernel ran on the GPU, 0-100.", {"gpu"})
                         .labels({device});
    gpu_memory_used_bytes_ =
        &r.gauge("optimate:gpu_memory_used_bytes", "NVML: GPU memory in use, every process's.", {"gpu"}).labels({device});
    gpu_memory_total_bytes_ =
        &r.gauge("optimate:gpu_memory_total_bytes", "NVML: the GPU's memory.", {"gpu"}).labels({device});
  }
  collect();
  r.add_collect_hook([this] { collect(); });
}

void ResourceMetrics::collect() {
  if (const std::optional<ProcessUsage> u = read_process_usage()) {
    if (u->cpu_seconds > cpu_seconds_.value()) cpu_seconds_.inc(u->cpu_seconds - cpu_seconds_.value());
    resident_bytes_.set(u->resident_bytes);
    peak_resident_bytes_.set(u->peak_resident_bytes);
    num_cpus_.set(static_cast<double>(u->num_cpus));
  }
  if (gpu_)
    if (const std::optional<GpuReading> g = gpu_->read()) {
      gpu_util_pct_->set(g->util_pct);
      gpu_memory_used_bytes_->set(g->memory_used_bytes);
      gpu_memory_total_bytes_->set(g->memory_total_bytes);
    }
}

}  // namespace optimate::metrics
