// What `optimate bench` does after its report, in either mode (in-process or --url): the cost
// of each run at --price-per-hour, the regression gate (--gate FILE: a nonzero exit when a run is
// worse than its recorded figure beyond the tolerance) and --record-gate FILE (the runs'
// figures as a gate file).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/run_result.h"

namespace optimate::apps {

struct GateOptions {
  double price_per_hour = 0.0;
  std::string gate;
  std::string record;
  double record_tolerance = 0.05;
};

void add_gate_options(CLI::App& cmd, GateOptions& options);
// Before the report: Error(kInvalidArgument) for a bad price, an unreadable or malformed gate.
void check_gate_options(const GateOptions& options);
// Sets each run's price.
void price_runs(const GateOptions& options, std::vector<bench::RunResult>& runs);
// After the report written to `dir`: records the figures, checks the gate (its table printed and
// appended to DIR/report.md); Error when the gate fails.
void gate_runs(const GateOptions& options, const std::vector<bench::RunResult>& runs, const std::string& command,
               const std::string& dir);

}  // namespace optimate::apps
