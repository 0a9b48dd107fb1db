// Seeded random draws whose values are the same on every platform and standard library.
//
// std::mt19937_64's output sequence is fixed by the C++ standard, but std::*_distribution
// algorithms are not (libstdc++ and libc++ draw different normals from the same engine), so a
// workload built from them would differ between machines. Every distribution the benchmark
// needs is therefore written out here from the engine's raw 64-bit output.
#pragma once

#include <cstdint>
#include <random>

namespace optimate::bench {

class Random {
 public:
  explicit Random(uint64_t seed) : engine_(seed) {}

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  // Uniform in (0, 1]: safe under log().
  double uniform_open_zero() { return 1.0 - uniform(); }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [lo, hi], without modulo bias (Lemire's method with rejection).
  int64_t uniform_int(int64_t lo, int64_t hi);
  double exponential(double rate);
  double normal(double mean, double stddev);
  // Gamma(shape, scale) by Marsaglia and Tsang (2000); shape < 1 uses the boost U^(1/shape).
  double gamma(double shape, double scale);
  double lognormal(double mu, double sigma);

 private:
  std::mt19937_64 engine_;
  // Box-Muller yields normals in pairs; the second one is kept for the next call.
  bool has_spare_normal_ = false;
  double spare_normal_ = 0.0;
};

}  // namespace optimate::bench
