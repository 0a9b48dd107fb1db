// GPU sampling: which device CUDA_VISIBLE_DEVICES selects, NVML absent (this machine), and the
// samples of a fake GPU reaching the report.
#include "bench/gpu_monitor.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bench/report_json.h"
#include "bench/report_markdown.h"
#include "bench/summary.h"

namespace optimate::bench {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

TEST(GpuMonitor, VisibleDevicesSelectTheFirstListedGpu) {
  EXPECT_EQ(parse_visible_devices(nullptr).index, 0u);
  EXPECT_FALSE(parse_visible_devices(nullptr).none);
  EXPECT_EQ(parse_visible_devices("3,1").index, 3u);
  EXPECT_EQ(parse_visible_devices(" 2 ").index, 2u);
  EXPECT_EQ(parse_visible_devices("GPU-8a5e4f2c,1").uuid, "GPU-8a5e4f2c");
  EXPECT_TRUE(parse_visible_devices("").none);
  EXPECT_TRUE(parse_visible_devices("-1").none);
  EXPECT_TRUE(parse_visible_devices("gpu0").none);
}

TEST(GpuMonitor, WithoutNvmlNothingIsSampledAndTheReportSaysWhy) {
  const NvmlOpen missing = open_nvml({}, "libnvidia-ml-absent.so.1");
  EXPECT_EQ(missing.probe, nullptr);
  EXPECT_EQ(missing.unavailable.rfind("NVML unavailable: ", 0), 0u) << missing.unavailable;
  EXPECT_NE(missing.unavailable.find("libnvidia-ml-absent.so.1"), std::string::npos) << missing.unavailable;
  EXPECT_EQ(open_nvml({.none = true}).unavailable, "CUDA_VISIBLE_DEVICES exposes no GPU");

  GpuMonitor monitor(nullptr, missing.unavailable);
  RunResult run{.label = "cpu"};
  run.gpu = monitor.stop();
  EXPECT_TRUE(run.gpu.samples.empty());
  const RunSummary s = summarize(run);
  EXPECT_EQ(s.gpu_util_pct.count, 0);
  const std::string md = render_markdown({s}, "no gpu");
  EXPECT_NE(md.find("GPU utilization: not sampled (" + missing.unavailable + ")."), std::string::npos) << md;
  EXPECT_EQ(md.find("GPU util %"), std::string::npos);
}

// Utilization 40% on the first read, 60% after; memory grows by 1 GiB a read.
class FakeGpu final : public GpuProbe {
 public:
  explicit FakeGpu(bool fail) : fail_(fail) {}
  std::string device() const override { return "Fake GPU (NVML index 0)"; }
  std::optional<GpuReading> read() override {
    if (fail_) return std::nullopt;
    ++reads_;
    return GpuReading{reads_ == 1 ? 40.0 : 60.0, reads_ * kGiB, 80 * kGiB};
  }

 private:
  bool fail_;
  int reads_ = 0;
};

TEST(GpuMonitor, SamplesAtStartAndStopReachSummaryMarkdownAndJson) {
  // An interval far longer than the test: exactly the start and stop samples.
  GpuMonitor monitor(std::make_unique<FakeGpu>(false), "", std::chrono::hours(1));
  RunResult run{.label = "gpu"};
  run.gpu = monitor.stop();
  ASSERT_EQ(run.gpu.samples.size(), 2u);
  EXPECT_EQ(run.gpu.device, "Fake GPU (NVML index 0)");
  EXPECT_LE(run.gpu.samples[0].t_s, run.gpu.samples[1].t_s);
  const RunSummary s = summarize(run);
  EXPECT_DOUBLE_EQ(s.gpu_util_pct.mean, 50.0);
  EXPECT_DOUBLE_EQ(s.gpu_util_pct.max, 60.0);
  EXPECT_DOUBLE_EQ(s.gpu_memory_used_gib.max, 2.0);
  EXPECT_DOUBLE_EQ(s.gpu_memory_total_gib, 80.0);
  const std::string md = render_markdown({s}, "gpu");
  EXPECT_NE(md.find("| GPU util % |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 50.0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| Max GPU memory used (GiB) | 2.00 |"), std::string::npos) << md;
  EXPECT_EQ(md.find("not sampled"), std::string::npos);
  const nlohmann::json j = run_to_json(run, s);
  EXPECT_EQ(j["gpu_samples"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["summary"]["gpu"]["util_pct"]["max"].get<double>(), 60.0);
}

TEST(GpuMonitor, AProbeWhoseReadsAllFailSaysSo) {
  GpuMonitor monitor(std::make_unique<FakeGpu>(true), "", std::chrono::hours(1));
  const GpuUsage usage = monitor.stop();
  EXPECT_TRUE(usage.samples.empty());
  EXPECT_EQ(usage.unavailable, "every NVML read of Fake GPU (NVML index 0) failed");
}

}  // namespace
}  // namespace optimate::bench
