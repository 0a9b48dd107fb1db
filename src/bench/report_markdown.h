// The comparison table of the seed's section 4.3: one row per configuration, each number of a
// later row followed by its change against the first row, then the full vllm-bench metrics
// and the per-priority breakdown.
#pragma once

#include <string>
#include <vector>

#include "bench/summary.h"

namespace optimate::bench {

std::string render_markdown(const std::vector<RunSummary>& runs, const std::string& title);

// "1450 (+16.0%)": `value` with its relative change against `base`; no delta on the base row
// or when either side is missing (NaN) or the base is 0.
std::string with_delta(double value, double base, int decimals, bool is_base_row);

}  // namespace optimate::bench
