// `optimate bench --calibrate`: measure a real backend and write the cost profile that
// `--backend sim` runs on.
#pragma once

#include <string>
#include <vector>

namespace optimate::apps {

struct CalibrateArgs {
  std::string backend;            // auto, cpu or cuda (the engine resolves auto)
  std::string config;             // the engine configuration whose limits and KV cache are calibrated
  std::string model;              // overrides engine.model when set
  std::string out;                // the profile JSON to write
  std::vector<std::string> sets;  // engine overrides (KEY=VALUE), as for a benchmark
  std::string workload, sweep;    // must be empty: a calibration runs no workload
};

void run_calibration(const CalibrateArgs& args);

}  // namespace optimate::apps
