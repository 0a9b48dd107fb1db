// The HTTP target of `optimate bench`: any OpenAI-compatible server (Optimate, vLLM, SGLang,
// TGI, ...), driven over streaming /v1/completions the way `vllm bench serve` drives it.
//
// Arrivals are honoured as in-process: open-loop requests are sent at their arrival time,
// a closed loop keeps `concurrency` requests in flight, an offline workload sends everything at
// once. At most `max_concurrency` requests are in flight, one keep-alive connection each; a
// request that arrives while all are busy waits for one (vllm bench's --max-concurrency), and
// its record's send time is when it really went out.
#pragma once

#include <cstdint>
#include <string>

#include "bench/in_process.h"
#include "bench/run_result.h"
#include "bench/workload.h"

namespace optimate::bench {

// Connections when neither the workload (closed loop) nor --max-concurrency bounds them.
inline constexpr int64_t kDefaultMaxConnections = 1024;

struct HttpTargetOptions {
  std::string model;            // the request's "model"; empty: the first of GET /v1/models
  std::string api_key;          // sent as "Authorization: Bearer KEY" when not empty
  int64_t max_concurrency = 0;  // requests in flight; 0: the closed loop's, else kDefaultMaxConnections
  double timeout_s = 600.0;     // a request fails when the server sends nothing for this long
  // How often the server's resources (GPU utilization and memory, the process's) are read from
  // its /metrics during the run; 0: only before and after it.
  int64_t resource_poll_ms = 500;
};

// Records one request per workload request, in workload order. Failures of single requests
// (an HTTP error, a dropped connection, a malformed stream, a timeout) are failed records;
// Error only when the benchmark cannot start: a bad URL, a server that cannot be reached, or
// no model to name.
RunResult run_http(const std::string& url, const Workload& workload, const HttpTargetOptions& options,
                   const ProgressFn& progress = {});

}  // namespace optimate::bench
