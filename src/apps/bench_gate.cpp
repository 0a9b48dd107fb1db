#include "apps/bench_gate.h"

#include <cmath>
#include <cstdio>
#include <fstream>

#include "bench/regression_gate.h"
#include "bench/summary.h"
#include "core/error.h"

namespace optimate::apps {

void add_gate_options(CLI::App& cmd, GateOptions& o) {
  cmd.add_option("--price-per-hour", o.price_per_hour, "what an hour of the target costs, in dollars: the report "
                 "adds the cost per million output tokens");
  cmd.add_option("--gate", o.gate, "regression gate: a TOML of recorded figures per run (output_throughput, "
                 "ttft_p99_ms, tolerance); exit 1 when a run is worse beyond the tolerance");
  cmd.add_option("--record-gate", o.record, "write the runs' output throughput and P99 TTFT as a gate file");
  cmd.add_option("--record-gate-tolerance", o.record_tolerance, "tolerance written by --record-gate")
      ->capture_default_str();
}

void check_gate_options(const GateOptions& o) {
  if (!(o.price_per_hour >= 0) || !std::isfinite(o.price_per_hour))
    fail(ErrorCode::kInvalidArgument, "--price-per-hour must be a number of dollars >= 0, got {}", o.price_per_hour);
  if (!(o.record_tolerance >= 0 && o.record_tolerance < 1))
    fail(ErrorCode::kInvalidArgument, "--record-gate-tolerance must be in [0, 1), got {}", o.record_tolerance);
  if (!o.gate.empty()) bench::load_gate(o.gate);  // a malformed gate fails before the runs, not after
}

void price_runs(const GateOptions& o, std::vector<bench::RunResult>& runs) {
  for (bench::RunResult& r : runs) r.price_per_hour = o.price_per_hour;
}

void gate_runs(const GateOptions& o, const std::vector<bench::RunResult>& runs, const std::string& command,
               const std::string& dir) {
  if (o.gate.empty() && o.record.empty()) return;
  std::vector<bench::RunSummary> summaries;
  for (const bench::RunResult& r : runs) summaries.push_back(bench::summarize(r));
  if (!o.record.empty()) {
    std::ofstream out(o.record);
    if (!(out << bench::gate_toml(summaries, o.record_tolerance, command)))
      fail(ErrorCode::kNotFound, "--record-gate: cannot write {}", o.record);
    std::fprintf(stdout, "Gate figures written to %s\n", o.record.c_str());
  }
  if (o.gate.empty()) return;
  const bench::GateResult result = bench::check_gate(bench::load_gate(o.gate), summaries);
  const std::string table = bench::render_gate(result, o.gate);
  std::fputs(table.c_str(), stdout);
  std::ofstream(dir + "/report.md", std::ios::app) << table;
  if (!result.passed())
    fail(ErrorCode::kInvalidArgument, "regression gate {} failed: a run is worse than its recorded figure beyond "
         "the tolerance, or the runs and the gate disagree (table above)", o.gate);
}

}  // namespace optimate::apps
