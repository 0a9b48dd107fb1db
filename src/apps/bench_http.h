// `optimate bench --url`: one workload against one or more live OpenAI-compatible servers,
// one report row per server (the first is the baseline row).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "apps/bench_gate.h"

namespace optimate::apps {

struct HttpBenchOptions {
  std::string workload;
  std::vector<std::string> urls;
  std::vector<std::string> labels;       // none, or one per URL (default: the URL)
  std::vector<std::string> model_names;  // none (ask each server), one for all, or one per URL
  std::string api_key;                   // default: $OPENAI_API_KEY
  int64_t max_concurrency = 0;
  double timeout_s = 600.0;
  std::vector<std::string> sets;  // workload.* overrides only: the engine is the server's
  std::string out_dir;
  GateOptions gate;
};

void run_bench_http(const HttpBenchOptions& options);

}  // namespace optimate::apps
