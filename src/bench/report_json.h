// The machine-readable report: the workload, each run's summary, and every raw request record
// and step sample, so any other statistic can be computed later without rerunning.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/run_result.h"
#include "bench/summary.h"
#include "bench/workload.h"

namespace optimate::bench {

nlohmann::json workload_to_json(const WorkloadSpec& spec);
nlohmann::json summary_to_json(const RunSummary& summary);
nlohmann::json run_to_json(const RunResult& run, const RunSummary& summary);

// {"workload": ..., "runs": [{"label", "summary", "records", "steps"}, ...]}. NaN is written as
// null (JSON has no NaN).
nlohmann::json report_to_json(const WorkloadSpec& spec, const std::vector<RunResult>& runs,
                              const std::vector<RunSummary>& summaries);

}  // namespace optimate::bench
