// `optimate bench`: run one workload against several configurations (or a sweep of one knob)
// in-process, on the real model (CPU or CUDA) or the simulated backend, or against live
// servers (--url, bench_http.cpp), and write the comparison report.
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/bench_calibrate.h"
#include "apps/bench_gate.h"
#include "apps/bench_http.h"
#include "apps/commands.h"
#include "bench/bench_target.h"
#include "bench/cost_model.h"
#include "bench/http_target.h"
#include "bench/in_process.h"
#include "bench/progress.h"
#include "bench/report_files.h"
#include "bench/toml_override.h"
#include "bench/workload_toml.h"
#include "core/error.h"

namespace optimate::apps {
namespace {

struct BenchOptions {
  std::string workload;
  std::string compare = "baseline";
  std::string sweep;
  std::string backend = "auto";  // auto: the configuration's own device setting
  std::string profile = "profiles/h200-llama3-8b.json";
  std::string model;
  std::vector<std::string> sets;
  std::string out_dir;
  bool calibrate = false;
  HttpBenchOptions http;  // --url and the flags that only it takes
  GateOptions gate;       // --price-per-hour, --gate, --record-gate (either mode)
};

// The command line that reproduces a report, quoted in it.
std::string command_line(const BenchOptions& o) {
  std::string s = fmt::format("optimate bench --workload {} --compare {}", o.workload, o.compare);
  if (!o.sweep.empty()) s += " --sweep " + o.sweep;
  s += " --backend " + o.backend;
  if (o.backend == "sim") s += " --profile " + o.profile;
  if (!o.model.empty()) s += " --model " + o.model;
  for (const auto& set : o.sets) s += " --set " + set;
  if (o.gate.price_per_hour > 0) s += fmt::format(" --price-per-hour {}", o.gate.price_per_hour);
  return s;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, sep);)
    if (!part.empty()) out.push_back(part);
  return out;
}

bool is_workload_key(const std::string& key) { return key.rfind("workload.", 0) == 0; }

// One configuration to run: its name in the table plus the overrides that make it.
struct Variant {
  std::string config;
  std::string label;  // empty: the file's own label
  std::vector<std::string> engine_overrides;
  std::vector<std::string> workload_overrides;
  double sweep_value = 0.0;
};

std::vector<Variant> plan_variants(const BenchOptions& o) {
  std::vector<std::string> engine_sets, workload_sets;
  for (const auto& s : o.sets) (is_workload_key(bench::split_assignment(s).first) ? workload_sets : engine_sets).push_back(s);
  const std::vector<std::string> configs = split(o.compare, ',');
  if (configs.empty()) fail(ErrorCode::kInvalidArgument, "--compare names no configuration");
  std::vector<Variant> out;
  if (o.sweep.empty()) {
    for (const auto& c : configs) out.push_back({c, "", engine_sets, workload_sets});
    return out;
  }
  if (configs.size() != 1)
    fail(ErrorCode::kInvalidArgument, "--sweep runs one configuration; got --compare {}", o.compare);
  auto [key, values] = bench::split_assignment(o.sweep);
  for (const std::string& v : split(values, ',')) {
    Variant var{configs.front(), fmt::format("{}={}", key, v), engine_sets, workload_sets};
    (is_workload_key(key) ? var.workload_overrides : var.engine_overrides).push_back(key + "=" + v);
    try {
      var.sweep_value = std::stod(v);
    } catch (const std::exception&) {
      fail(ErrorCode::kInvalidArgument, "--sweep value '{}' of {} is not a number", v, key);
    }
    out.push_back(var);
  }
  if (out.empty()) fail(ErrorCode::kInvalidArgument, "--sweep {} lists no values", o.sweep);
  return out;
}

void run_bench(const BenchOptions& o) {
  if (o.calibrate) {
    run_calibration({o.backend, o.compare, o.model, o.out_dir, o.sets, o.workload, o.sweep});
    return;
  }
  if (o.backend != "auto" && o.backend != "cpu" && o.backend != "cuda" && o.backend != "sim")
    fail(ErrorCode::kInvalidArgument, "--backend must be auto, cpu, cuda or sim, got '{}'", o.backend);
  if (o.workload.empty()) fail(ErrorCode::kInvalidArgument, "--workload FILE is required");

  check_gate_options(o.gate);
  const std::vector<Variant> variants = plan_variants(o);
  std::optional<bench::CostProfile> profile;
  if (o.backend == "sim") profile = bench::load_cost_profile(o.profile);

  std::vector<bench::RunResult> runs;
  std::optional<bench::WorkloadSpec> first_spec;
  std::optional<bench::SweepAxis> sweep;
  if (!o.sweep.empty()) sweep = bench::SweepAxis{bench::split_assignment(o.sweep).first, {}};
  for (const Variant& v : variants) {
    const bench::WorkloadSpec spec = bench::load_workload_spec(o.workload, v.workload_overrides);
    const bench::Workload workload = bench::build_workload(spec);
    if (!first_spec) {
      first_spec = spec;
      bench::prepare_report_dir(o.out_dir.empty() ? "bench-results/" + spec.name : o.out_dir);
    }
    EngineConfig base;
    bench::NamedConfig named = bench::load_named_config(v.config, v.engine_overrides, base);
    if (!o.model.empty()) named.config.model = o.model;
    if (!profile && o.backend != "auto") named.config.device = parse_choice<Device>(o.backend, "--backend");
    bench::BuiltEngine target = profile ? bench::build_sim_engine(named.config, *profile, spec.token_id_max + 1)
                                        : bench::build_engine(named.config);
    const std::string label = v.label.empty() ? named.label : v.label;
    bench::ProgressBar bar(label);
    bench::RunResult run = bench::run_in_process(
        target, workload, [&](int64_t done, int64_t total, double t) { bar.update(done, total, t); });
    run.label = label;
    // A sweep's rows share the file's description; each states its own value instead.
    run.description = v.label.empty() ? named.description : fmt::format("{} with {}", named.label, v.label);
    runs.push_back(std::move(run));
    if (sweep) sweep->values.push_back(v.sweep_value);
  }
  price_runs(o.gate, runs);
  const std::string dir = o.out_dir.empty() ? "bench-results/" + first_spec->name : o.out_dir;
  const std::string md = bench::write_report_files(dir, command_line(o), *first_spec, runs, sweep);
  std::fputs(md.c_str(), stdout);
  std::fprintf(stdout, "\nReport, raw records and plots written to %s/\n", dir.c_str());
  gate_runs(o.gate, runs, command_line(o), dir);
}

// A flag of one mode given in the other is an error, never silently ignored.
void check_mode_flags(const CLI::App& cmd, bool http) {
  static const std::vector<std::string> in_process_only = {"--compare", "--sweep", "--backend", "--profile",
                                                           "--model", "--calibrate"};
  static const std::vector<std::string> http_only = {"--label", "--served-model-name", "--api-key",
                                                     "--max-concurrency", "--request-timeout"};
  for (const std::string& flag : http ? in_process_only : http_only) {
    if (cmd.count(flag) == 0) continue;
    if (http)
      fail(ErrorCode::kInvalidArgument, "{} does not apply with --url: a live server runs its own "
           "configuration (start one server per configuration and give each its --url)", flag);
    fail(ErrorCode::kInvalidArgument, "{} applies only with --url", flag);
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto opts = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Benchmark configurations on a workload: table, JSON, plots");
  cmd->add_option("--workload", opts->workload, "workload TOML (configs/workloads/*.toml)");
  cmd->add_option("--compare", opts->compare, "configurations to compare, first is the baseline row: "
                  "names in configs/ or TOML paths")->capture_default_str();
  cmd->add_option("--sweep", opts->sweep, "KEY=V1,V2,...: one run per value of an engine, optimizer "
                  "(NAME.option) or workload.* key");
  cmd->add_option("--backend", opts->backend, "auto (the configuration's device: a GPU when present), cpu or cuda (the real model), or sim "
                  "(the cost model)")->capture_default_str();
  cmd->add_option("--profile", opts->profile, "cost profile JSON for --backend sim")->capture_default_str();
  cmd->add_option("--model", opts->model, "model file or folder (overrides engine.model)");
  cmd->add_option("--set", opts->sets, "KEY=VALUE applied to every configuration (workload.* to the workload)");
  cmd->add_option("--out", opts->out_dir, "output folder (default bench-results/WORKLOAD_NAME); "
                  "with --calibrate, the profile JSON to write");
  cmd->add_flag("--calibrate", opts->calibrate, "measure a backend (the --compare configuration, with "
                "--set) and write a cost profile for --backend sim to --out");
  cmd->add_option("--url", opts->http.urls, "benchmark running OpenAI-compatible servers instead "
                  "(http://HOST:PORT; several, comma-separated or repeated: one row each, first is the baseline)")
      ->delimiter(',');
  cmd->add_option("--label", opts->http.labels, "with --url: row names, one per URL (default: the URL)")
      ->delimiter(',');
  cmd->add_option("--served-model-name", opts->http.model_names, "with --url: the model to request, one for "
                  "all or one per URL (default: the first of the server's GET /v1/models)")->delimiter(',');
  cmd->add_option("--api-key", opts->http.api_key, "with --url: sent as a Bearer token (default: $OPENAI_API_KEY)");
  cmd->add_option("--max-concurrency", opts->http.max_concurrency, "with --url: most requests in flight "
                  "(default: a closed loop's concurrency, else " + std::to_string(bench::kDefaultMaxConnections) + ")");
  cmd->add_option("--request-timeout", opts->http.timeout_s, "with --url: fail a request after this many "
                  "seconds without a byte from the server")->capture_default_str();
  add_gate_options(*cmd, opts->gate);
  cmd->callback([opts, cmd] {
    const bool http = !opts->http.urls.empty();
    check_mode_flags(*cmd, http);
    if (!http) return run_bench(*opts);
    opts->http.workload = opts->workload;
    opts->http.sets = opts->sets;
    opts->http.out_dir = opts->out_dir;
    opts->http.gate = opts->gate;
    run_bench_http(opts->http);
  });
}

}  // namespace optimate::apps
