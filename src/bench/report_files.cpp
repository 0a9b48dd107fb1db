#include "bench/report_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "bench/plots.h"
#include "bench/report_json.h"
#include "bench/report_markdown.h"
#include "bench/step_profile_report.h"
#include "core/error.h"

namespace optimate::bench {
namespace {

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) fail(ErrorCode::kInvalidArgument, "cannot write {}", path.string());
}

}  // namespace

void prepare_report_dir(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error || !std::filesystem::is_directory(dir))
    fail(ErrorCode::kInvalidArgument, "--out {}: cannot create the folder ({})", dir,
         error ? error.message() : "a file of that name is in the way");
}

std::string write_report_files(const std::string& dir, const std::string& command, const WorkloadSpec& spec,
                               const std::vector<RunResult>& runs, const std::optional<SweepAxis>& sweep) {
  prepare_report_dir(dir);
  const std::filesystem::path d(dir);
  std::vector<RunSummary> summaries;
  for (const RunResult& r : runs) summaries.push_back(summarize(r));

  const std::string target = runs.empty() ? "" : runs.front().target;
  std::string md = render_markdown(summaries, fmt::format("{} on {}", spec.name, target));
  std::string profiles;
  for (const RunResult& r : runs) {
    if (r.step_profile) profiles += render_step_profile(r.label, *r.step_profile);
    else if (!r.step_profile_unavailable.empty())
      profiles += fmt::format("\n{}: no engine profile ({}).\n", r.label, r.step_profile_unavailable);
  }
  if (!profiles.empty()) md += "\n### Where the engine's time went\n" + profiles;
  md += fmt::format("\nCommand: `{}`\n", command);
  // Queue time exists only where the target reports admission (not over HTTP).
  const bool has_queue_time = std::any_of(summaries.begin(), summaries.end(),
                                          [](const RunSummary& s) { return s.queue_ms.count > 0; });
  md += "\nPlots: ttft_cdf.svg, e2e_cdf.svg, itl_cdf.svg, throughput.svg, queue.svg";
  if (has_queue_time) md += ", queue_time_cdf.svg";
  md += sweep ? ", sweep_throughput.svg, sweep_latency.svg\n" : "\n";
  write_file(d / "report.md", md);
  write_file(d / "report.json", report_to_json(spec, runs, summaries).dump(1) + "\n");
  write_file(d / "ttft_cdf.svg", plot_latency_cdf(runs, LatencyMetric::kTtft));
  write_file(d / "e2e_cdf.svg", plot_latency_cdf(runs, LatencyMetric::kE2e));
  write_file(d / "itl_cdf.svg", plot_latency_cdf(runs, LatencyMetric::kItl));
  write_file(d / "throughput.svg", plot_throughput_over_time(runs));
  write_file(d / "queue.svg", plot_queue_over_time(runs));
  if (has_queue_time) write_file(d / "queue_time_cdf.svg", plot_latency_cdf(runs, LatencyMetric::kQueue));
  if (sweep) {
    write_file(d / "sweep_throughput.svg",
               plot_sweep(sweep->knob, sweep->values, summaries,
                          {{"output tok/s", [](const RunSummary& s) { return s.output_throughput; }}},
                          "output tokens/s"));
    std::vector<SweepMetric> latency = {
        {"mean TTFT", [](const RunSummary& s) { return s.ttft_ms.mean; }},
        {"P99 TTFT", [](const RunSummary& s) { return s.ttft_ms.p99; }}};
    if (!summaries.empty() && summaries.front().classes.size() >= 2)
      latency.push_back({"P99 TTFT, most important class",
                         [](const RunSummary& s) { return s.classes.front().ttft_ms.p99; }});
    write_file(d / "sweep_latency.svg", plot_sweep(sweep->knob, sweep->values, summaries, latency, "ms"));
  }
  return md;
}

}  // namespace optimate::bench
