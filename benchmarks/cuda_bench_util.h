// Helpers shared by the GPU benchmarks (benchmarks/cuda_*.cu): graph capture and replay timing,
// the device-to-device copy rate they set their figures against, flag parsing and JSON output.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"

namespace optimate::cuda::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median milliseconds of `reps` calls of fn(i) (i = 0, 1, ...; it enqueues work on `s`) timed
// by events, after `warmup` untimed calls.
template <typename Fn>
double time_events_ms(Fn fn, int reps, int warmup = 1, cudaStream_t s = nullptr) {
  cudaEvent_t a, b;
  OPTIMATE_CUDA_CHECK(cudaEventCreate(&a));
  OPTIMATE_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) fn(i);
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    OPTIMATE_CUDA_CHECK(cudaEventRecord(a, s));
    fn(i);
    OPTIMATE_CUDA_CHECK(cudaEventRecord(b, s));
    OPTIMATE_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    OPTIMATE_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(ms);
}

// Median ms of one replay of `graph`.
inline double replay_ms(cudaGraphExec_t graph, cudaStream_t s, int reps) {
  return time_events_ms([&](int) { OPTIMATE_CUDA_CHECK(cudaGraphLaunch(graph, s)); }, reps, 2, s);
}

// Writes j to path (no-op for an empty path).
inline void write_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw std::runtime_error("cannot write " + path);
  std::fputs(j.dump(2).c_str(), f);
  std::fclose(f);
}

// "64,256,1024" -> {64, 256, 1024}.
inline std::vector<int64_t> parse_list(const std::string& v) {
  std::vector<int64_t> out;
  for (size_t p = 0; p < v.size();) {
    const size_t q = v.find(',', p);
    out.push_back(std::stoll(v.substr(p, q - p)));
    p = q == std::string::npos ? v.size() : q + 1;
  }
  return out;
}

// Device-to-device copy of 4 GiB, bytes read + written per second (median of 10, in GB/s):
// the bandwidth ceiling the decode figures are set against.
inline double copy_bandwidth_gbs() {
  const size_t bytes = size_t{4} << 30;
  DeviceBuffer<uint8_t> src(bytes), dst(bytes);
  OPTIMATE_CUDA_CHECK(cudaMemset(src.get(), 1, bytes));
  const double ms = time_events_ms([&](int) {
    OPTIMATE_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice));
  }, 10);
  return 2.0 * bytes / (ms * 1e-3) / 1e9;
}

template <typename Fn>
cudaGraphExec_t capture(cudaStream_t s, Fn enqueue) {
  cudaGraph_t g = nullptr;
  OPTIMATE_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  enqueue();
  OPTIMATE_CUDA_CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t exec = nullptr;
  OPTIMATE_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
  cudaGraphDestroy(g);
  return exec;
}

// Parses "--name value" pairs: each flag's handler gets its value. False (after printing the
// flag) for a flag with no handler.
inline bool parse_flags(int argc, char** argv,
                        const std::map<std::string, std::function<void(const std::string&)>>& handlers) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const auto it = handlers.find(argv[i]);
    if (it == handlers.end()) {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return false;
    }
    it->second(argv[i + 1]);
  }
  return true;
}

}  // namespace optimate::cuda::bench
