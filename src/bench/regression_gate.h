// The benchmark's regression gate: recorded figures of a workload's runs (a TOML file), and
// the check `optimate bench ... --gate FILE` makes against them after a run. A run fails when
// its output throughput falls below, or its P99 TTFT rises above, the recorded figure by more
// than the tolerance. Every run must have a recorded figure, so a gate never passes by checking
// nothing; the file may record more runs than one benchmark makes (the variants of a stage).
//
//   tolerance = 0.05              # relative; per figure: throughput_tolerance, ttft_tolerance
//   [runs.h200-throughput]        # a run's label (the table's Scenario column)
//   output_throughput = 15792     # output tok/s, at least (1 - tolerance) x this
//   ttft_p99_ms = 11000           # P99 TTFT, at most (1 + tolerance) x this
//   source = "docs/benchmarks.md, Overlapped steps"   # where the figure was recorded
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/summary.h"

namespace optimate::bench {

struct GateFigure {
  std::string label;
  std::optional<double> output_throughput;
  std::optional<double> ttft_p99_ms;
  double throughput_tolerance = 0.05;
  double ttft_tolerance = 0.05;
  std::string source;
};

struct Gate {
  std::string path;
  std::vector<GateFigure> figures;
};

// Error(kInvalidFile) naming the file and key for anything malformed (a figure <= 0, a
// tolerance outside [0, 1), an unknown key, a run with no figure).
Gate parse_gate(const std::string& toml_text, const std::string& path);
Gate load_gate(const std::string& path);

struct GateCheck {
  std::string label;
  std::string metric;  // "output tok/s" or "P99 TTFT (ms)"
  double recorded = 0.0;
  double measured = 0.0;
  double limit = 0.0;  // the worst value that passes
  bool passed = false;
};

struct GateResult {
  std::vector<GateCheck> checks;
  std::vector<std::string> errors;  // runs the gate does not record, runs with failed requests
  bool passed() const;
};

GateResult check_gate(const Gate& gate, const std::vector<RunSummary>& runs);
// A Markdown table of the checks and the errors, ending with the verdict.
std::string render_gate(const GateResult& result, const std::string& path);
// The runs' figures as a gate file (`--record-gate FILE`), with `tolerance`.
std::string gate_toml(const std::vector<RunSummary>& runs, double tolerance, const std::string& source);

}  // namespace optimate::bench
