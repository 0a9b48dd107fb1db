// Fitting a cost profile to measured step times. The cost model is
//   t = step_overhead + per_seq_overhead·seqs + max(Wb/(BW·e_gb), Fg/(FLOPS·e_c))
//                                             + max(Kb/(BW·e_ab), Fa/(FLOPS·e_c)),
// linear in (overheads, 1/e_gb, 1/e_c, 1/e_ab) once each point's side of each max (its regime)
// is fixed, and a side is fixed by a threshold on the point's FLOPs per byte. So the fit tries
// every pair of thresholds that splits the points differently, solves a non-negative least
// squares problem on relative errors for each, and keeps the split whose solution, evaluated
// with the max() as the simulator will, fits best. Decode points then determine the bandwidth
// terms and overheads, prefill points the compute term, long-context decodes the KV term.
#pragma once

#include <string>
#include <vector>

#include "bench/cost_model.h"

namespace optimate::bench {

struct FitPoint {
  std::string name;
  std::vector<SeqWork> seqs;
  double measured_s = 0.0;
};

struct FittedPoint {
  FitPoint point;
  double predicted_s = 0.0;         // by the fitted profile's CostModel
  double error_pct = 0.0;           // (predicted - measured) / measured · 100
  bool gemm_compute_bound = false;  // which side of each max the point is on
  bool attention_compute_bound = false;
};

struct FitResult {
  CostProfile profile;
  std::vector<FittedPoint> points;
  double mean_abs_error_pct = 0.0;
  // Achieved rates in the regime each term dominates (0 when no point shows the term).
  double weight_bytes_per_s = 0.0;
  double kv_bytes_per_s = 0.0;
  double flops_per_s = 0.0;
  std::vector<std::string> notes;  // peaks raised to an achieved rate, terms the points did not show
};

// `base` gives the model shape, weight_bits, kv_bytes_per_element and the probed peaks
// (memory_bandwidth_bytes_per_s, peak_flops; 0 where no probe ran: the peak is then the best
// rate the backend reached, at efficiency 1). A peak below what the backend reaches is raised
// to it, so every efficiency stays in (0, 1]. Errors (kInvalidArgument): fewer than 5 points,
// a measured time <= 0 or not finite, a point with no sequences.
FitResult fit_cost_profile(const CostProfile& base, const std::vector<FitPoint>& points);

}  // namespace optimate::bench
