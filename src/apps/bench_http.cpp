#include "apps/bench_http.h"

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "bench/http_target.h"
#include "bench/progress.h"
#include "bench/report_files.h"
#include "bench/toml_override.h"
#include "bench/workload_toml.h"
#include "core/error.h"

namespace optimate::apps {
namespace {

std::string join(const std::vector<std::string>& items) { return fmt::format("{}", fmt::join(items, ",")); }

// The command line that reproduces a report, quoted in it (the API key is left out).
std::string command_line(const HttpBenchOptions& o) {
  std::string s = fmt::format("optimate bench --workload {} --url {}", o.workload, join(o.urls));
  if (!o.labels.empty()) s += " --label " + join(o.labels);
  if (!o.model_names.empty()) s += " --served-model-name " + join(o.model_names);
  if (o.max_concurrency > 0) s += fmt::format(" --max-concurrency {}", o.max_concurrency);
  for (const auto& set : o.sets) s += " --set " + set;
  if (o.gate.price_per_hour > 0) s += fmt::format(" --price-per-hour {}", o.gate.price_per_hour);
  return s;
}

void check(const HttpBenchOptions& o) {
  if (o.workload.empty()) fail(ErrorCode::kInvalidArgument, "--workload FILE is required");
  if (!o.labels.empty() && o.labels.size() != o.urls.size())
    fail(ErrorCode::kInvalidArgument, "--label gives {} labels for {} URLs: give one per --url", o.labels.size(),
         o.urls.size());
  if (o.model_names.size() > 1 && o.model_names.size() != o.urls.size())
    fail(ErrorCode::kInvalidArgument, "--served-model-name gives {} names for {} URLs: give one for all or one "
         "per --url", o.model_names.size(), o.urls.size());
  for (const auto& set : o.sets)
    if (bench::split_assignment(set).first.rfind("workload.", 0) != 0)
      fail(ErrorCode::kInvalidArgument, "--set {}: with --url only workload.* keys apply; the engine's "
           "configuration is the server's own", set);
}

}  // namespace

void run_bench_http(const HttpBenchOptions& o) {
  check(o);
  check_gate_options(o.gate);
  const bench::WorkloadSpec spec = bench::load_workload_spec(o.workload, o.sets);
  const bench::Workload workload = bench::build_workload(spec);
  bench::HttpTargetOptions target;
  target.api_key = o.api_key;
  if (target.api_key.empty())
    if (const char* key = std::getenv("OPENAI_API_KEY")) target.api_key = key;
  target.max_concurrency = o.max_concurrency;
  target.timeout_s = o.timeout_s;

  const std::string dir = o.out_dir.empty() ? "bench-results/" + spec.name : o.out_dir;
  bench::prepare_report_dir(dir);
  std::vector<bench::RunResult> runs;
  for (size_t i = 0; i < o.urls.size(); ++i) {
    target.model = o.model_names.empty() ? "" : o.model_names[o.model_names.size() == 1 ? 0 : i];
    const std::string label = o.labels.empty() ? o.urls[i] : o.labels[i];
    bench::ProgressBar bar(label);
    bench::RunResult run = bench::run_http(
        o.urls[i], workload, target, [&](int64_t done, int64_t total, double t) { bar.update(done, total, t); });
    run.label = label;
    run.description = "live server at " + o.urls[i];
    runs.push_back(std::move(run));
  }
  price_runs(o.gate, runs);
  const std::string md = bench::write_report_files(dir, command_line(o), spec, runs, std::nullopt);
  std::fputs(md.c_str(), stdout);
  std::fprintf(stdout, "\nReport, raw records and plots written to %s/\n", dir.c_str());
  gate_runs(o.gate, runs, command_line(o), dir);
}

}  // namespace optimate::apps
