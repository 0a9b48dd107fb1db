// Writes a benchmark's outputs into one folder: report.md, report.json and the SVG plots.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/run_result.h"
#include "bench/summary.h"
#include "bench/workload.h"

namespace optimate::bench {

struct SweepAxis {
  std::string knob;             // "predictive.max_wait_ms"
  std::vector<double> values;   // one per run, in run order
};

// Creates the report folder (and its parents) before a run, so a folder that cannot be made fails
// at once, not after the run; Error(kInvalidArgument) naming it.
void prepare_report_dir(const std::string& dir);

// Returns the Markdown report (also written to DIR/report.md). `command` is the command line
// that produced it, quoted in the report so tables can be regenerated.
std::string write_report_files(const std::string& dir, const std::string& command, const WorkloadSpec& spec,
                               const std::vector<RunResult>& runs, const std::optional<SweepAxis>& sweep);

}  // namespace optimate::bench
