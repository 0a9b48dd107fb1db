// The resource columns of the seed's table: a server's process, engine and GPU series read back
// from its /metrics and turned into a run's usage; the in-process figures; the report's GPU,
// CPU and cost columns.
#include <gtest/gtest.h>

#include <cmath>

#include "bench/report_markdown.h"
#include "bench/server_resources.h"
#include "bench/summary.h"
#include "metrics/registry.h"
#include "metrics/resource_metrics.h"

namespace optimate::bench {
namespace {

class FixedGpu final : public metrics::GpuProbe {
 public:
  explicit FixedGpu(double util) : util_(util) {}
  std::string device() const override { return "NVIDIA H200 (NVML index 0)"; }
  std::optional<metrics::GpuReading> read() override { return metrics::GpuReading{util_, 120e9, 140e9}; }

 private:
  double util_;
};

std::string exposition(const std::string& device, std::unique_ptr<metrics::GpuProbe> gpu) {
  metrics::Registry registry;
  metrics::ResourceMetrics resources(registry, "org/model", {device, 16e9, 64e9}, std::move(gpu));
  return registry.render();
}

TEST(ServerResources, ReadsBackWhatTheServerExports) {
  const ServerResources r = parse_server_resources(exposition("cuda", std::make_unique<FixedGpu>(87)));
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.device, "cuda");
  EXPECT_DOUBLE_EQ(r.engine_memory_bytes, 80e9);
  ASSERT_TRUE(r.gpu_util_pct.has_value());
  EXPECT_DOUBLE_EQ(*r.gpu_util_pct, 87);
  EXPECT_DOUBLE_EQ(*r.gpu_memory_used_bytes, 120e9);
  EXPECT_DOUBLE_EQ(r.gpu_memory_total_bytes, 140e9);
  EXPECT_EQ(r.gpu, "NVIDIA H200 (NVML index 0)");
  // This test process's own CPU time and memory.
  EXPECT_GT(r.cpu_seconds, 0);
  EXPECT_GT(r.resident_bytes, 0);
  EXPECT_GE(r.peak_resident_bytes, r.resident_bytes);
  EXPECT_GE(r.num_cpus, 1);

  const ServerResources cpu = parse_server_resources(exposition("cpu", nullptr));
  EXPECT_TRUE(cpu.found);
  EXPECT_FALSE(cpu.gpu_util_pct.has_value());
  EXPECT_FALSE(parse_server_resources("vllm:num_requests_running{model_name=\"m\"} 0\n").found);
}

ServerResources resources(double cpu_s, double rss, double peak, const std::string& device = "cuda") {
  ServerResources r;
  r.found = true;
  r.device = device;
  r.cpu_seconds = cpu_s;
  r.resident_bytes = rss;
  r.peak_resident_bytes = peak;
  r.num_cpus = 16;
  r.engine_memory_bytes = 100e9;
  return r;
}

TEST(ServerResources, ARunIsTheScrapesBeforeDuringAndAfterIt) {
  ServerResources before = resources(10, 2e9, 3e9), after = resources(30, 2e9, 3e9);
  before.device_busy_seconds = 5;
  after.device_busy_seconds = 12;
  ServerResources mid = resources(20, 2.5e9, 3e9);
  mid.gpu_util_pct = 90;
  mid.gpu_memory_used_bytes = 125e9;
  mid.gpu_memory_total_bytes = 140e9;
  mid.gpu = "H200";
  GpuUsage gpu;
  HostUsage host;
  server_usage(before, {{1.0, mid}}, after, 10.0, gpu, host);
  EXPECT_TRUE(gpu.unavailable.empty());
  ASSERT_EQ(gpu.samples.size(), 1u);
  EXPECT_DOUBLE_EQ(gpu.samples[0].util_pct, 90);
  EXPECT_DOUBLE_EQ(gpu.samples[0].memory_used_bytes, 125e9);
  EXPECT_DOUBLE_EQ(gpu.engine_busy_pct, 70);  // 7 s of device time in 10 s
  EXPECT_DOUBLE_EQ(host.cpu_seconds, 20);
  EXPECT_EQ(host.num_cpus, 16);
  // The high-water mark did not move during the run: the most seen resident is its peak.
  EXPECT_DOUBLE_EQ(host.peak_resident_bytes, 2.5e9);
  after.peak_resident_bytes = 4e9;  // it did: the mark is the run's
  server_usage(before, {{1.0, mid}}, after, 10.0, gpu, host);
  EXPECT_DOUBLE_EQ(host.peak_resident_bytes, 4e9);

  GpuUsage cpu_gpu;
  HostUsage cpu_host;
  server_usage(resources(1, 1e9, 1e9, "cpu"), {}, resources(3, 1e9, 1e9, "cpu"), 4.0, cpu_gpu, cpu_host);
  EXPECT_EQ(cpu_gpu.unavailable, "the server runs on the cpu");
  EXPECT_DOUBLE_EQ(cpu_host.cpu_seconds, 2);

  GpuUsage other_gpu;
  HostUsage other_host;
  server_usage(ServerResources{}, {}, ServerResources{}, 4.0, other_gpu, other_host);
  EXPECT_NE(other_host.unavailable.find("not an Optimate server"), std::string::npos);
}

RunResult two_requests(double seconds) {
  RunResult run;
  run.label = "cpu";
  for (int i = 0; i < 2; ++i) {
    RequestRecord r;
    r.success = true;
    r.first_token_s = 0.5;
    r.finish_s = seconds;
    r.output_tokens = 500;
    r.token_times_s = {0.5, seconds};
    run.records.push_back(r);
  }
  return run;
}

TEST(ResourceColumns, CpuUtilizationPeakRssAndCostPerMillionTokens) {
  RunResult run = two_requests(10.0);  // 1000 output tokens in 10 s: 100 tok/s
  run.host = {.cpu_seconds = 15.0, .wall_s = 10.0, .num_cpus = 2, .peak_resident_bytes = 3.0 * (1 << 30)};
  run.gpu.unavailable = "cpu backend";
  run.price_per_hour = 3.6;  // $0.001 a second: 10 s for 1000 tokens is $10 per million
  const RunSummary s = summarize(run);
  EXPECT_DOUBLE_EQ(s.cpu_util_pct, 75.0);
  EXPECT_DOUBLE_EQ(s.peak_rss_gib, 3.0);
  EXPECT_NEAR(s.usd_per_million_output_tokens, 10.0, 1e-9);
  EXPECT_TRUE(std::isnan(s.gpu_util_mean_pct));
  const std::string md = render_markdown({s}, "cpu");
  EXPECT_NE(md.find("| CPU util % | Peak RSS (GiB) | $/M out tok |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 75.0 | 3.00 | 10.000 |"), std::string::npos) << md;
  EXPECT_NE(md.find("GPU utilization: not sampled (cpu backend)"), std::string::npos) << md;

  RunResult unpriced = two_requests(10.0);
  EXPECT_TRUE(std::isnan(summarize(unpriced).usd_per_million_output_tokens));
  EXPECT_EQ(render_markdown({summarize(unpriced)}, "x").find("$/M out tok"), std::string::npos);
}

TEST(ResourceColumns, GpuUtilizationFallsBackToTheEnginesBusyTime) {
  RunResult nvml = two_requests(10.0);
  nvml.label = "nvml";
  nvml.gpu.samples = {{0.0, 80, 100e9}, {1.0, 90, 110e9}};
  RunResult engine = two_requests(10.0);
  engine.label = "engine";
  engine.gpu.engine_busy_pct = 95.0;
  engine.gpu.engine_memory_bytes = 116.0 * (1 << 30);
  const RunSummary a = summarize(nvml), b = summarize(engine);
  EXPECT_DOUBLE_EQ(a.gpu_util_mean_pct, 85);
  EXPECT_EQ(a.gpu_util_source, "NVML");
  EXPECT_NEAR(a.gpu_memory_peak_gib, 110e9 / double(1 << 30), 1e-9);
  EXPECT_DOUBLE_EQ(b.gpu_util_mean_pct, 95);
  EXPECT_EQ(b.gpu_util_source, "engine busy time");
  EXPECT_DOUBLE_EQ(b.gpu_memory_peak_gib, 116.0);
  const std::string md = render_markdown({a, b}, "gpu");
  EXPECT_NE(md.find("| GPU util % | GPU mem (GiB) |"), std::string::npos) << md;
  EXPECT_NE(md.find("GPU util of engine: the engine's device busy time"), std::string::npos) << md;
}

}  // namespace
}  // namespace optimate::bench
