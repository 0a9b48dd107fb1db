#include "bench/distributions.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace optimate::bench {

uint64_t derive_seed(uint64_t seed, uint64_t stream) {
  // splitmix64 finalizer: nearby (seed, stream) pairs give unrelated engine seeds.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void validate_arrival_spec(const ArrivalSpec& s) {
  auto positive = [](double v, const char* field) {
    if (!(v > 0.0) || !std::isfinite(v))
      fail(ErrorCode::kInvalidArgument, "workload.arrival.{} must be > 0, got {}", field, v);
  };
  switch (s.kind) {
    case ArrivalKind::kConstant:
    case ArrivalKind::kPoisson:
      positive(s.rate_per_s, "rate");
      break;
    case ArrivalKind::kGamma:
      positive(s.rate_per_s, "rate");
      positive(s.burstiness, "burstiness");
      break;
    case ArrivalKind::kBurst:
      positive(s.on_s, "on_s");
      positive(s.off_s, "off_s");
      positive(s.on_rate_per_s, "on_rate");
      if (s.off_rate_per_s < 0.0)
        fail(ErrorCode::kInvalidArgument, "workload.arrival.off_rate must be >= 0, got {}",
             s.off_rate_per_s);
      break;
    case ArrivalKind::kPhases: {
      if (s.phases.empty()) fail(ErrorCode::kInvalidArgument, "workload.arrival.phases is empty (kind = \"phases\")");
      bool any_rate = false;
      for (size_t i = 0; i < s.phases.size(); ++i) {
        if (!(s.phases[i].duration_s > 0.0) || !std::isfinite(s.phases[i].duration_s))
          fail(ErrorCode::kInvalidArgument, "workload.arrival.phases[{}].duration_s must be > 0, got {}", i,
               s.phases[i].duration_s);
        if (!(s.phases[i].rate_per_s >= 0.0) || !std::isfinite(s.phases[i].rate_per_s))
          fail(ErrorCode::kInvalidArgument, "workload.arrival.phases[{}].rate must be >= 0, got {}", i,
               s.phases[i].rate_per_s);
        any_rate |= s.phases[i].rate_per_s > 0.0;
      }
      if (!any_rate) fail(ErrorCode::kInvalidArgument, "workload.arrival.phases: every rate is 0");
      break;
    }
    case ArrivalKind::kClosedLoop:
      if (s.concurrency < 1)
        fail(ErrorCode::kInvalidArgument, "workload.arrival.concurrency must be >= 1, got {}",
             s.concurrency);
      break;
    case ArrivalKind::kOffline:
    case ArrivalKind::kTrace:
      break;
  }
}

void validate_length_spec(const LengthSpec& s, const char* field) {
  // A lognormal's max is only its clamp (drawn lengths stop at kMaxDrawnLength in any case).
  const double largest = s.kind == LengthKind::kFixed     ? double(s.value)
                         : s.kind == LengthKind::kUniform ? double(s.max)
                                                          : std::max(double(s.min), s.mean);
  if (largest > double(kMaxDrawnLength))
    fail(ErrorCode::kInvalidArgument, "{}: lengths must be at most {} tokens, got {}", field, kMaxDrawnLength, largest);
  switch (s.kind) {
    case LengthKind::kFixed:
      if (s.value < 1) fail(ErrorCode::kInvalidArgument, "{}.value must be >= 1, got {}", field, s.value);
      break;
    case LengthKind::kUniform:
      if (s.min < 1 || s.max < s.min)
        fail(ErrorCode::kInvalidArgument, "{}: need 1 <= min <= max, got min={} max={}", field,
             s.min, s.max);
      break;
    case LengthKind::kLognormal:
      if (!(s.mean >= 1.0) || !(s.sigma > 0.0))
        fail(ErrorCode::kInvalidArgument, "{}: need mean >= 1 and sigma > 0, got mean={} sigma={}",
             field, s.mean, s.sigma);
      if (s.min < 1 || s.max < s.min)
        fail(ErrorCode::kInvalidArgument, "{}: need 1 <= min <= max, got min={} max={}", field,
             s.min, s.max);
      break;
  }
}

int64_t draw_length(const LengthSpec& s, Random& rng) {
  switch (s.kind) {
    case LengthKind::kFixed:
      return s.value;
    case LengthKind::kUniform:
      return rng.uniform_int(s.min, s.max);
    case LengthKind::kLognormal: {
      // E[exp(N(mu, sigma))] = exp(mu + sigma^2 / 2): solve for mu so the stated mean holds.
      const double mu = std::log(s.mean) - 0.5 * s.sigma * s.sigma;
      const auto v = static_cast<int64_t>(std::llround(rng.lognormal(mu, s.sigma)));
      return std::clamp(v, s.min, std::min(s.max, kMaxDrawnLength));
    }
  }
  return s.value;
}

namespace {

// A Poisson process whose rate switches with the phase, the phases repeating. Exponential gaps
// are memoryless, so a draw that crosses a phase boundary restarts at the boundary with the
// next rate.
std::vector<double> phased_arrivals(const std::vector<ArrivalPhase>& phases, int64_t count, Random& rng) {
  std::vector<double> t(static_cast<size_t>(std::max<int64_t>(count, 0)), 0.0);
  double now = 0.0;
  size_t phase = 0;
  double phase_end = phases[0].duration_s;
  for (size_t i = 0; i < t.size(); ++i) {
    for (;;) {
      const double rate = phases[phase].rate_per_s;
      const double next = rate > 0.0 ? now + rng.exponential(rate) : phase_end;
      if (next < phase_end) {
        now = next;
        break;
      }
      now = phase_end;
      phase = (phase + 1) % phases.size();
      phase_end += phases[phase].duration_s;
    }
    t[i] = now;
  }
  return t;
}

}  // namespace

std::vector<double> draw_arrivals(const ArrivalSpec& s, int64_t count, Random& rng) {
  std::vector<double> t(static_cast<size_t>(std::max<int64_t>(count, 0)), 0.0);
  double now = 0.0;
  switch (s.kind) {
    case ArrivalKind::kOffline:
    case ArrivalKind::kClosedLoop:
    case ArrivalKind::kTrace:
      return t;
    case ArrivalKind::kConstant:
      for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<double>(i) / s.rate_per_s;
      return t;
    case ArrivalKind::kPoisson:
      // The first request goes out at t = 0, as vllm bench does; gaps follow.
      for (size_t i = 1; i < t.size(); ++i) t[i] = now += rng.exponential(s.rate_per_s);
      return t;
    case ArrivalKind::kGamma: {
      const double scale = 1.0 / (s.rate_per_s * s.burstiness);  // mean gap stays 1 / rate
      for (size_t i = 1; i < t.size(); ++i) t[i] = now += rng.gamma(s.burstiness, scale);
      return t;
    }
    case ArrivalKind::kBurst:
      return phased_arrivals({{s.on_s, s.on_rate_per_s}, {s.off_s, s.off_rate_per_s}}, count, rng);
    case ArrivalKind::kPhases:
      return phased_arrivals(s.phases, count, rng);
  }
  return t;
}

}  // namespace optimate::bench
