// Fitting a cost profile to measured step times. The cost model is
//   t = step_overhead + per_seq_overhead·seqs + max(Wb/(BW·e_gb), Fg/(FLOPS·e_gc))
//                                             + max(Kb/(BW·e_ab), Fa/(FLOPS·e_ac)),
// linear in (overheads, 1/e of each term) once each point's side of each max (its regime) is
// fixed, and a side is fixed by a threshold on the point's FLOPs per byte. So the fit tries
// every pair of thresholds that splits the points differently, solves a least squares problem
// on relative errors for each (overheads >= 0, efficiencies <= 1 of the probed peaks), and keeps
// the split whose solution, evaluated with the max() as the simulator will, fits best. Decode
// points then determine the bandwidth terms and overheads, prefill points the compute terms,
// long-context decodes the KV term.
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
  // Achieved rates where each term dominates (0: no point shows the term, and no probe).
  double weight_bytes_per_s = 0.0;
  double kv_bytes_per_s = 0.0;
  double gemm_flops_per_s = 0.0;
  double attention_flops_per_s = 0.0;
  std::vector<std::string> notes;  // "field: remark": terms at their peak or not shown, peaks not probed
};

// `base` gives the model shape, weight_bits, kv_bytes_per_element and the probed peaks
// (memory_bandwidth_bytes_per_s, peak_flops; 0 where no probe ran: the peak is then the best
// rate the backend reached, at efficiency 1). Errors (kInvalidArgument): fewer than 6 points,
// a measured time <= 0 or not finite, a point with no sequences, no probe and no point that
// shows the peak.
FitResult fit_cost_profile(const CostProfile& base, const std::vector<FitPoint>& points);

}  // namespace optimate::bench
