// The serving process's resources in /metrics: the standard process series, the engine's
// allocations, and NVML's GPU series only where a GPU can be read.
#include <gtest/gtest.h>

#include <vector>

#include "metrics/nvml_probe.h"
#include "metrics/process_usage.h"
#include "metrics/registry.h"
#include "metrics/resource_metrics.h"

namespace optimate::metrics {
namespace {

class CountingGpu final : public GpuProbe {
 public:
  std::string device() const override { return "GPU0"; }
  std::optional<GpuReading> read() override {
    ++reads;
    return GpuReading{double(10 * reads), 1e9, 2e9};
  }
  int reads = 0;
};

TEST(ResourceMetrics, ExportsTheProcessAndEngineAndReadsTheGpuAtEveryScrape) {
  Registry registry;
  auto gpu = std::make_unique<CountingGpu>();
  CountingGpu* probe = gpu.get();
  ResourceMetrics m(registry, "smollm2", {"cuda", 1000, 2000}, std::move(gpu));
  const std::string first = registry.render();
  for (const char* line : {"# TYPE process_cpu_seconds_total counter", "# TYPE process_resident_memory_bytes gauge",
                           "optimate:process_peak_resident_memory_bytes ", "optimate:process_cpus ",
                           "optimate:engine_memory_bytes{device=\"cuda\",model_name=\"smollm2\",part=\"weights\"} 1000",
                           "optimate:engine_memory_bytes{device=\"cuda\",model_name=\"smollm2\",part=\"kv_cache\"} 2000",
                           "optimate:gpu_memory_total_bytes{gpu=\"GPU0\"} 2e+09"})
    EXPECT_NE(first.find(line), std::string::npos) << line << "\n" << first;
  const int reads = probe->reads;
  const std::string second = registry.render();
  EXPECT_EQ(probe->reads, reads + 1);  // read at scrape time, not pushed
  EXPECT_NE(second.find("optimate:gpu_utilization_percent{gpu=\"GPU0\"} " + std::to_string(10 * (reads + 1))),
            std::string::npos) << second;
}

TEST(ResourceMetrics, WithoutAGpuTheGpuSeriesAreAbsent) {
  Registry registry;
  ResourceMetrics m(registry, "m", {"cpu", 1, 2}, nullptr);
  const std::string text = registry.render();
  EXPECT_EQ(text.find("optimate:gpu_"), std::string::npos);
  EXPECT_NE(text.find("device=\"cpu\""), std::string::npos);
  // An absent NVML says why rather than failing.
  EXPECT_NE(open_nvml({}, "libnvidia-ml-absent.so.1").unavailable.find("NVML unavailable"), std::string::npos);
}

TEST(ProcessUsage, PeakIsAtLeastTheResidentSetAndCanBeReset) {
  const std::optional<ProcessUsage> u = read_process_usage();
  ASSERT_TRUE(u.has_value());
  EXPECT_GT(u->resident_bytes, 0);
  EXPECT_GE(u->peak_resident_bytes, u->resident_bytes);
  EXPECT_GE(u->num_cpus, 1);
  {
    std::vector<char> big(64 << 20, 1);  // 64 MiB touched: the peak rises past it
    volatile char touched = big[big.size() / 2];
    (void)touched;
    const std::optional<ProcessUsage> high = read_process_usage();
    EXPECT_GE(high->peak_resident_bytes, u->resident_bytes + (32 << 20));
  }
  if (reset_peak_resident()) {  // the mark restarts from the resident set, the 64 MiB gone
    const std::optional<ProcessUsage> after = read_process_usage();
    EXPECT_LT(after->peak_resident_bytes, after->resident_bytes + (32 << 20));
  }
}

}  // namespace
}  // namespace optimate::metrics
