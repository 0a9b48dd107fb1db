// WorkloadSpec from TOML (the [workload] table of a file such as configs/workloads/mixed.toml).
#pragma once

#include <string>
#include <vector>

#include "bench/workload.h"

namespace optimate::bench {

// Reads `path`, applies "workload.x.y=value" overrides, and returns the spec. Unknown keys and
// bad values are Error(kInvalidFile) naming the file and the key. A relative trace path is
// taken relative to the workload file's folder.
WorkloadSpec load_workload_spec(const std::string& path,
                                const std::vector<std::string>& overrides = {});

// The same, from TOML text; `source` names it in messages and anchors relative paths.
WorkloadSpec parse_workload_spec(const std::string& toml_text, const std::string& source,
                                 const std::vector<std::string>& overrides = {});

}  // namespace optimate::bench
