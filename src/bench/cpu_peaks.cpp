#include "bench/cpu_peaks.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace optimate::bench {
namespace {

constexpr size_t kCopyBytes = size_t{256} << 20;  // far beyond any last-level cache
constexpr int64_t kGemmTokens = 512, kGemmDim = 2048;
// Each probe keeps the best of its runs over at least this long, so a moment of contention
// from other processes does not lower the peak.
constexpr double kProbeSeconds = 1.0;
constexpr int kMinRuns = 5;

int resolve_threads(int num_threads) { return num_threads > 0 ? num_threads : omp_get_max_threads(); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The best rate of `run` (which returns its seconds) over kProbeSeconds and kMinRuns.
template <typename Run>
double best_rate(double units, Run&& run) {
  const auto start = std::chrono::steady_clock::now();
  double best = 0.0;
  for (int n = 0; n < kMinRuns || seconds_since(start) < kProbeSeconds; ++n) best = std::max(best, units / run());
  return best;
}

double copy_bandwidth(int threads) {
  // Filled before timing, so page faults are not measured.
  std::vector<char> src(kCopyBytes, 1), dst(kCopyBytes, 0);
  const size_t chunk = (kCopyBytes + threads - 1) / threads;
  return best_rate(2.0 * double(kCopyBytes), [&] {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int i = 0; i < threads; ++i) {
      const size_t begin = std::min(kCopyBytes, size_t(i) * chunk);
      const size_t end = std::min(kCopyBytes, begin + chunk);
      std::memcpy(dst.data() + begin, src.data() + begin, end - begin);
    }
    return seconds_since(t0);
  });
}

double gemm_flops(int threads) {
  cpu::use_single_threaded_blas();  // as the CPU runner does: threads come from OpenMP only
  std::vector<float> x(kGemmTokens * kGemmDim, 0.5f), w(kGemmDim * kGemmDim, 0.25f), y(kGemmTokens * kGemmDim);
  const double flops = 2.0 * double(kGemmTokens) * double(kGemmDim) * double(kGemmDim);
  return best_rate(flops, [&] {
    const auto t0 = std::chrono::steady_clock::now();
    cpu::linear(x.data(), w.data(), y.data(), kGemmTokens, kGemmDim, kGemmDim, false, threads);
    return seconds_since(t0);
  });
}

}  // namespace

PeakProbe measure_cpu_peaks(int num_threads) {
  const int threads = resolve_threads(num_threads);
  PeakProbe p;
  p.memory_bandwidth_bytes_per_s = copy_bandwidth(threads);
  p.peak_flops = gemm_flops(threads);
  p.bandwidth_method =
      fmt::format("memcpy of a {} MiB buffer split over {} threads, bytes read + written, best run over {:.0f} s",
                  kCopyBytes >> 20, threads, kProbeSeconds);
  p.flops_method = fmt::format(
      "fp32 {}x{}x{} product through the CPU backend's matmul (OpenBLAS sgemm per OpenMP thread, {} threads), "
      "best run over {:.0f} s",
      kGemmTokens, kGemmDim, kGemmDim, threads, kProbeSeconds);
  return p;
}

std::string describe_cpu(int num_threads) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  int cores = 0;
  while (std::getline(in, line)) {
    if (line.rfind("processor", 0) == 0) ++cores;
    if (line.rfind("model name", 0) == 0 && model == "unknown CPU") {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return fmt::format("{}, {} logical cores ({} threads used)", model, cores, resolve_threads(num_threads));
}

}  // namespace optimate::bench
