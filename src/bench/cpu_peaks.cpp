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
constexpr int kCopyRuns = 5;
constexpr int64_t kGemmTokens = 512, kGemmDim = 2048;
constexpr int kGemmRuns = 3;

int resolve_threads(int num_threads) { return num_threads > 0 ? num_threads : omp_get_max_threads(); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double copy_bandwidth(int threads) {
  // Filled before timing, so page faults are not measured.
  std::vector<char> src(kCopyBytes, 1), dst(kCopyBytes, 0);
  const size_t chunk = (kCopyBytes + threads - 1) / threads;
  double best = 0.0;
  for (int run = 0; run < kCopyRuns; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int i = 0; i < threads; ++i) {
      const size_t begin = std::min(kCopyBytes, size_t(i) * chunk);
      const size_t end = std::min(kCopyBytes, begin + chunk);
      std::memcpy(dst.data() + begin, src.data() + begin, end - begin);
    }
    best = std::max(best, 2.0 * double(kCopyBytes) / seconds_since(t0));
  }
  return best;
}

double gemm_flops(int threads) {
  cpu::use_single_threaded_blas();  // as the CPU runner does: threads come from OpenMP only
  std::vector<float> x(kGemmTokens * kGemmDim, 0.5f), w(kGemmDim * kGemmDim, 0.25f), y(kGemmTokens * kGemmDim);
  const double flops = 2.0 * double(kGemmTokens) * double(kGemmDim) * double(kGemmDim);
  cpu::linear(x.data(), w.data(), y.data(), kGemmTokens, kGemmDim, kGemmDim, false, threads);  // warm-up
  double best = 0.0;
  for (int run = 0; run < kGemmRuns; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    cpu::linear(x.data(), w.data(), y.data(), kGemmTokens, kGemmDim, kGemmDim, false, threads);
    best = std::max(best, flops / seconds_since(t0));
  }
  return best;
}

}  // namespace

PeakProbe measure_cpu_peaks(int num_threads) {
  const int threads = resolve_threads(num_threads);
  PeakProbe p;
  p.memory_bandwidth_bytes_per_s = copy_bandwidth(threads);
  p.peak_flops = gemm_flops(threads);
  p.bandwidth_method =
      fmt::format("{:.2f} GB/s: memcpy of a {} MiB buffer split over {} threads, bytes read + written, best of {}",
                  p.memory_bandwidth_bytes_per_s * 1e-9, kCopyBytes >> 20, threads, kCopyRuns);
  p.flops_method = fmt::format(
      "{:.1f} GFLOP/s: fp32 {}x{}x{} product through the CPU backend's matmul (OpenBLAS sgemm per "
      "OpenMP thread, {} threads), best of {}",
      p.peak_flops * 1e-9, kGemmTokens, kGemmDim, kGemmDim, threads, kGemmRuns);
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
