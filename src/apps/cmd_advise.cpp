// `optimate advise`: which optimizers fit a workload (bench/advise.h). Prints the comparison
// table and the recommended configuration as TOML (also written to --out).
#include <cstdio>
#include <fstream>
#include <string>

#include <CLI/CLI.hpp>

#include "apps/commands.h"
#include "bench/advise.h"
#include "bench/bench_target.h"
#include "bench/workload.h"
#include "bench/workload_toml.h"
#include "core/error.h"

namespace optimate::apps {
namespace {

struct AdviseOptions {
  std::string workload;
  std::string trace;
  std::string profile = "profiles/h200-llama3-8b-calibrated.json";
  std::string slo;
  std::string config;  // base configuration (configs/NAME or a TOML path)
  std::vector<std::string> sets;
  std::string out;
};

bench::WorkloadSpec trace_workload(const std::string& path) {
  bench::WorkloadSpec spec;
  spec.name = "trace";
  spec.num_requests = 0;  // the whole trace
  spec.arrival.kind = bench::ArrivalKind::kTrace;
  spec.trace = bench::TraceSpec{path, bench::TraceFormat::kPlain};
  return spec;
}

void run_advise(const AdviseOptions& o) {
  if (o.workload.empty() == o.trace.empty())
    fail(ErrorCode::kInvalidArgument, "give one of --workload W.toml or --trace T.jsonl");
  const bench::WorkloadSpec spec = o.trace.empty() ? bench::load_workload_spec(o.workload) : trace_workload(o.trace);
  const bench::Workload workload = bench::build_workload(spec);
  const bench::CostProfile profile = bench::load_cost_profile(o.profile);
  const bench::SloTargets slo = bench::parse_slo(o.slo);
  if (o.config.empty() && !o.sets.empty()) fail(ErrorCode::kInvalidArgument, "--set applies to a --config");
  EngineConfig base;
  if (!o.config.empty()) base = bench::load_named_config(o.config, o.sets, EngineConfig{}).config;
  const bench::Advice advice = bench::advise(workload, profile, slo, base);
  std::fputs(bench::advice_markdown(advice).c_str(), stdout);
  const std::string toml = bench::recommended_toml(advice);
  std::fprintf(stdout, "\n```toml\n%s```\n", toml.c_str());
  if (!o.out.empty()) {
    std::ofstream f(o.out);
    if (!(f << toml)) fail(ErrorCode::kNotFound, "cannot write {}", o.out);
    std::fprintf(stdout, "\nWritten to %s (serve it with --config %s)\n", o.out.c_str(), o.out.c_str());
  }
}

}  // namespace

void add_advise_command(CLI::App& app) {
  auto o = std::make_shared<AdviseOptions>();
  CLI::App* cmd = app.add_subcommand("advise", "Which optimizers fit a workload: simulated comparison and a TOML");
  cmd->add_option("--workload", o->workload, "workload TOML (configs/workloads/*.toml)");
  cmd->add_option("--trace", o->trace, "a recorded trace (optimate serve --record-trace) instead of --workload");
  cmd->add_option("--profile", o->profile, "cost profile of the backend to simulate")->capture_default_str();
  cmd->add_option("--slo", o->slo, "targets: ttft_p99_ms=MS,tpot_p99_ms=MS (either may be left out)");
  cmd->add_option("--config", o->config, "base configuration the candidates start from (configs/NAME or a TOML; "
                  "default: the engine's defaults)");
  cmd->add_option("--set", o->sets, "KEY=VALUE applied to the base configuration");
  cmd->add_option("--out", o->out, "also write the recommended TOML here");
  cmd->callback([o] { run_advise(*o); });
}

}  // namespace optimate::apps
