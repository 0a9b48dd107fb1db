#include "bench/random.h"

#include <cmath>

#include "core/error.h"

namespace optimate::bench {

int64_t Random::uniform_int(int64_t lo, int64_t hi) {
  OPTIMATE_CHECK(lo <= hi, "uniform_int({}, {})", lo, hi);
  const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;
  if (range == 0) return static_cast<int64_t>(engine_());  // the full 64-bit range
  // Rejects the top sliver of the 64-bit space that would bias the low residues.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t x;
  do {
    x = engine_();
  } while (x >= limit);
  return lo + static_cast<int64_t>(x % range);
}

double Random::exponential(double rate) { return -std::log(uniform_open_zero()) / rate; }

double Random::normal(double mean, double stddev) {
  if (has_spare_normal_) {
    has_spare_normal_ = false;
    return mean + stddev * spare_normal_;
  }
  const double r = std::sqrt(-2.0 * std::log(uniform_open_zero()));
  const double theta = 2.0 * M_PI * uniform();
  spare_normal_ = r * std::sin(theta);
  has_spare_normal_ = true;
  return mean + stddev * r * std::cos(theta);
}

double Random::gamma(double shape, double scale) {
  OPTIMATE_CHECK(shape > 0 && scale > 0, "gamma({}, {})", shape, scale);
  if (shape < 1.0) {
    // Gamma(a) = Gamma(a + 1) * U^(1/a): keeps the fast method valid for bursty shapes.
    const double u = uniform_open_zero();
    return gamma(shape + 1.0, scale) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = normal(0.0, 1.0);
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = uniform_open_zero();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v * scale;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v * scale;
  }
}

double Random::lognormal(double mu, double sigma) { return std::exp(normal(mu, sigma)); }

}  // namespace optimate::bench
