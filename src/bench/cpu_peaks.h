// What this CPU can do at best, measured independently of the model: the roofline's two peaks
// that a calibration divides the backend's achieved rates by to get its efficiencies.
#pragma once

#include <string>

namespace optimate::bench {

struct PeakProbe {
  double memory_bandwidth_bytes_per_s = 0.0;
  double peak_flops = 0.0;
  std::string bandwidth_method;  // how each was measured, for the profile's sources
  std::string flops_method;
};

// Copy bandwidth (bytes read + bytes written per second) of a 256 MiB buffer split across
// `num_threads` threads, and the FLOP/s of a 512 x 2048 x 2048 fp32 matrix product through the
// CPU backend's own matmul (cpu::linear: OpenBLAS split over OpenMP threads); the best run of
// each over a second. num_threads 0: OpenMP's default, as the CPU runner takes it. Takes ~3 s.
PeakProbe measure_cpu_peaks(int num_threads);

// "AMD EPYC, 2 cores (2 threads used)", from /proc/cpuinfo where it exists.
std::string describe_cpu(int num_threads);

}  // namespace optimate::bench
