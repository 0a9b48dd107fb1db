#include "bench/calibration_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>

#include "core/error.h"

namespace optimate::bench {
namespace {

// Unknowns: step overhead (s), per-sequence overhead (s), seconds per weight byte, per GEMM
// FLOP, per KV byte, per attention FLOP.
constexpr size_t kNumParams = 6;
using Params = std::array<double, kNumParams>;
using Row = std::array<double, kNumParams>;
constexpr size_t kStep = 0, kPerSeq = 1, kWeightByte = 2, kGemmFlop = 3, kKvByte = 4, kAttentionFlop = 5;
constexpr int kMaxRefinements = 20;

// A point's workload in the cost model's units, which do not depend on the efficiencies.
struct Terms {
  double seqs = 0, weight_bytes = 0, gemm_flops = 0, kv_bytes = 0, attention_flops = 0, measured_s = 0;
};

struct Regime {
  bool gemm_compute = false;
  bool attention_compute = false;
};

double predict(const Terms& p, const Params& k) {
  return k[kStep] + k[kPerSeq] * p.seqs + std::max(k[kWeightByte] * p.weight_bytes, k[kGemmFlop] * p.gemm_flops) +
         std::max(k[kKvByte] * p.kv_bytes, k[kAttentionFlop] * p.attention_flops);
}

double objective(const std::vector<Terms>& pts, const Params& k) {
  double sum = 0.0;
  for (const Terms& p : pts) sum += std::pow((predict(p, k) - p.measured_s) / p.measured_s, 2);
  return sum;
}

Regime regime_of(const Terms& p, const Params& k) {
  return {k[kGemmFlop] * p.gemm_flops > k[kWeightByte] * p.weight_bytes,
          k[kAttentionFlop] * p.attention_flops > k[kKvByte] * p.kv_bytes};
}

// The row of the linear model for a point on the given sides of the two maxima.
Row row_of(const Terms& p, Regime r) {
  return {1.0,
          p.seqs,
          r.gemm_compute ? 0.0 : p.weight_bytes,
          r.gemm_compute ? p.gemm_flops : 0.0,
          r.attention_compute ? 0.0 : p.kv_bytes,
          r.attention_compute ? p.attention_flops : 0.0};
}

// Least squares on the columns in `use` by Householder QR, each column scaled to unit norm
// first; nullopt when those columns are (nearly) dependent.
std::optional<Params> least_squares(const std::vector<Row>& a, const std::vector<double>& b, unsigned use) {
  std::vector<size_t> cols;
  for (size_t j = 0; j < kNumParams; ++j)
    if (use & (1u << j)) cols.push_back(j);
  const size_t m = a.size(), n = cols.size();
  if (m < n) return std::nullopt;
  std::vector<std::vector<double>> q(n, std::vector<double>(m));
  std::vector<double> scale(n), rhs = b;
  for (size_t c = 0; c < n; ++c) {
    double norm = 0.0;
    for (size_t i = 0; i < m; ++i) norm += a[i][cols[c]] * a[i][cols[c]];
    if (norm == 0.0) return std::nullopt;
    scale[c] = std::sqrt(norm);
    for (size_t i = 0; i < m; ++i) q[c][i] = a[i][cols[c]] / scale[c];
  }
  for (size_t c = 0; c < n; ++c) {
    double norm = 0.0;
    for (size_t i = c; i < m; ++i) norm += q[c][i] * q[c][i];
    norm = std::sqrt(norm);
    if (norm < 1e-8) return std::nullopt;  // (nearly) dependent on the columns before it
    const double alpha = q[c][c] > 0 ? -norm : norm;
    std::vector<double> v(m, 0.0);
    for (size_t i = c; i < m; ++i) v[i] = q[c][i];
    v[c] -= alpha;
    double vv = 0.0;
    for (size_t i = c; i < m; ++i) vv += v[i] * v[i];
    auto reflect = [&](std::vector<double>& x) {
      double dot = 0.0;
      for (size_t i = c; i < m; ++i) dot += v[i] * x[i];
      for (size_t i = c; i < m; ++i) x[i] -= 2.0 * dot / vv * v[i];
    };
    for (size_t d = c; d < n; ++d) reflect(q[d]);
    reflect(rhs);
  }
  Params x{};
  std::vector<double> y(n);
  for (size_t c = n; c-- > 0;) {
    double s = rhs[c];
    for (size_t d = c + 1; d < n; ++d) s -= q[d][c] * y[d];
    y[c] = s / q[c][c];
    x[cols[c]] = y[c] / scale[c];
  }
  return x;
}

// Non-negative least squares with kNumParams unknowns: the optimum is the unconstrained solution on
// some subset of them (the others at 0), so every subset is tried.
std::optional<Params> nonnegative_least_squares(const std::vector<Row>& a, const std::vector<double>& b) {
  std::optional<Params> best;
  double best_ss = std::numeric_limits<double>::infinity();
  for (unsigned use = 1; use < (1u << kNumParams); ++use) {
    const std::optional<Params> x = least_squares(a, b, use);
    if (!x || std::any_of(x->begin(), x->end(), [](double v) { return v < 0.0; })) continue;
    double ss = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
      double r = -b[i];
      for (size_t j = 0; j < kNumParams; ++j) r += a[i][j] * (*x)[j];
      ss += r * r;
    }
    if (ss < best_ss) {
      best_ss = ss;
      best = x;
    }
  }
  return best;
}

// Solves with every point's regime fixed, each unknown at least its lower bound (a probed peak
// caps a rate, so it floors the seconds per unit). Rows are divided by the measured time, so
// the fit minimises relative errors and short decode steps count as much as long prefills.
std::optional<Params> solve(const std::vector<Terms>& pts, const std::vector<Regime>& regimes, const Params& lower) {
  std::vector<Row> a;
  std::vector<double> b;
  for (size_t i = 0; i < pts.size(); ++i) {
    Row r = row_of(pts[i], regimes[i]);
    double rhs = 1.0;
    for (size_t j = 0; j < kNumParams; ++j) {
      r[j] /= pts[i].measured_s;
      rhs -= r[j] * lower[j];
    }
    a.push_back(r);
    b.push_back(rhs);
  }
  std::optional<Params> above = nonnegative_least_squares(a, b);
  if (above)
    for (size_t j = 0; j < kNumParams; ++j) (*above)[j] += lower[j];
  return above;
}

std::vector<double> distinct_sorted(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

Params fit_params(const std::vector<Terms>& pts, const Params& lower) {
  // Each max() is decided by a threshold on the point's FLOPs per byte: try every split.
  std::vector<double> gemm_ratio, attention_ratio;
  for (const Terms& p : pts) {
    gemm_ratio.push_back(p.gemm_flops / p.weight_bytes);
    attention_ratio.push_back(p.attention_flops / p.kv_bytes);
  }
  const std::vector<double> g = distinct_sorted(gemm_ratio), at = distinct_sorted(attention_ratio);
  std::optional<Params> best;
  double best_obj = std::numeric_limits<double>::infinity();
  auto consider = [&](const std::optional<Params>& k) {
    if (!k) return false;
    const double obj = objective(pts, *k);
    if (obj >= best_obj) return false;
    best_obj = obj;
    best = k;
    return true;
  };
  std::vector<Regime> regimes(pts.size());
  for (size_t gs = 0; gs <= g.size(); ++gs) {
    for (size_t as = 0; as <= at.size(); ++as) {
      for (size_t i = 0; i < pts.size(); ++i)
        regimes[i] = {gs < g.size() && gemm_ratio[i] >= g[gs], as < at.size() && attention_ratio[i] >= at[as]};
      consider(solve(pts, regimes, lower));
    }
  }
  if (!best)
    fail(ErrorCode::kInvalidArgument, "calibration fit found no solution: the points do not determine the model");
  // Refine: put each point on the side its fitted max() picks, and solve again.
  for (int it = 0; it < kMaxRefinements; ++it) {
    for (size_t i = 0; i < pts.size(); ++i) regimes[i] = regime_of(pts[i], *best);
    if (!consider(solve(pts, regimes, lower))) break;
  }
  return *best;
}

Terms terms_of(const CostModel& unit, const FitPoint& p) {
  if (p.seqs.empty()) fail(ErrorCode::kInvalidArgument, "calibration point '{}' has no sequences", p.name);
  if (!std::isfinite(p.measured_s) || p.measured_s <= 0.0)
    fail(ErrorCode::kInvalidArgument, "calibration point '{}': measured time {} s is not a positive number", p.name,
         p.measured_s);
  const StepCost c = unit.step_cost(p.seqs);
  return {double(p.seqs.size()), c.weight_bytes, c.gemm_flops, c.kv_bytes, c.attention_flops, p.measured_s};
}

// A rate the fit put no time beyond the lower bound on is at the peak.
double efficiency(double rate, double peak, const char* what, std::vector<std::string>& notes) {
  if (rate <= 0.0) {
    notes.push_back(fmt::format("{}: no point shows this term; set to 1", what));
    return 1.0;
  }
  if (rate >= peak * (1.0 - 1e-9))
    notes.push_back(fmt::format("{}: at the peak (the fit put no time on this term beyond it)", what));
  return std::min(1.0, rate / peak);
}

// The peak a profile states: the probe's, or without one the best rate the backend reached.
double peak_of(double probed, double best, const char* what, std::vector<std::string>& notes) {
  if (probed > 0.0) return probed;
  if (best <= 0.0) fail(ErrorCode::kInvalidArgument, "calibration: no {} was probed and no point is bound by it", what);
  notes.push_back(fmt::format("{}: no probe; the best rate the backend reached ({:.4g}/s)", what, best));
  return best;
}

}  // namespace

FitResult fit_cost_profile(const CostProfile& base, const std::vector<FitPoint>& points) {
  if (points.size() < kNumParams)
    fail(ErrorCode::kInvalidArgument, "calibration fit needs at least {} points, got {}", kNumParams, points.size());
  CostProfile unit_profile = base;  // unit peaks and efficiencies: step_cost then yields bytes and FLOPs
  unit_profile.memory_bandwidth_bytes_per_s = unit_profile.peak_flops = 1.0;
  unit_profile.gemm_bandwidth_efficiency = unit_profile.gemm_compute_efficiency = 1.0;
  unit_profile.attention_bandwidth_efficiency = unit_profile.attention_compute_efficiency = 1.0;
  const CostModel unit(unit_profile);
  std::vector<Terms> pts;
  for (const FitPoint& p : points) pts.push_back(terms_of(unit, p));
  Params lower{};
  if (base.memory_bandwidth_bytes_per_s > 0.0)
    lower[kWeightByte] = lower[kKvByte] = 1.0 / base.memory_bandwidth_bytes_per_s;
  if (base.peak_flops > 0.0) lower[kGemmFlop] = lower[kAttentionFlop] = 1.0 / base.peak_flops;
  const Params k = fit_params(pts, lower);

  FitResult out;
  auto rate = [](double seconds_per_unit) { return seconds_per_unit > 0.0 ? 1.0 / seconds_per_unit : 0.0; };
  out.weight_bytes_per_s = rate(k[kWeightByte]);
  out.kv_bytes_per_s = rate(k[kKvByte]);
  out.gemm_flops_per_s = rate(k[kGemmFlop]);
  out.attention_flops_per_s = rate(k[kAttentionFlop]);
  CostProfile& p = out.profile = base;
  p.memory_bandwidth_bytes_per_s =
      peak_of(base.memory_bandwidth_bytes_per_s, std::max(out.weight_bytes_per_s, out.kv_bytes_per_s),
              "memory_bandwidth_bytes_per_s", out.notes);
  p.peak_flops =
      peak_of(base.peak_flops, std::max(out.gemm_flops_per_s, out.attention_flops_per_s), "peak_flops", out.notes);
  const double bw = p.memory_bandwidth_bytes_per_s, fl = p.peak_flops;
  p.gemm_bandwidth_efficiency = efficiency(out.weight_bytes_per_s, bw, "gemm_bandwidth_efficiency", out.notes);
  p.gemm_compute_efficiency = efficiency(out.gemm_flops_per_s, fl, "gemm_compute_efficiency", out.notes);
  p.attention_bandwidth_efficiency = efficiency(out.kv_bytes_per_s, bw, "attention_bandwidth_efficiency", out.notes);
  p.attention_compute_efficiency = efficiency(out.attention_flops_per_s, fl, "attention_compute_efficiency", out.notes);
  p.step_overhead_s = k[kStep];
  p.per_seq_overhead_s = k[kPerSeq];

  // Report what the simulator will compute, not the fit's internal numbers.
  const CostModel fitted(p);
  double abs_sum = 0.0;
  for (size_t i = 0; i < points.size(); ++i) {
    FittedPoint f{points[i], fitted.step_cost(points[i].seqs).seconds};
    f.error_pct = (f.predicted_s - points[i].measured_s) / points[i].measured_s * 100.0;
    const Terms& t = pts[i];
    f.gemm_compute_bound =
        t.gemm_flops / (fl * p.gemm_compute_efficiency) > t.weight_bytes / (bw * p.gemm_bandwidth_efficiency);
    f.attention_compute_bound = t.attention_flops / (fl * p.attention_compute_efficiency) >
                                t.kv_bytes / (bw * p.attention_bandwidth_efficiency);
    abs_sum += std::abs(f.error_pct);
    out.points.push_back(std::move(f));
  }
  out.mean_abs_error_pct = abs_sum / double(points.size());
  return out;
}

}  // namespace optimate::bench
