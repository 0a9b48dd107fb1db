// The decode-step and prefill time breakdown for cuda_decode_bench: per-stage GPU times from
// the runner's stage timer (eager steps, events between stages), with the rate each
// projection reaches against the machine's two ceilings (copy bandwidth, GEMM FLOP/s).
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_model_runner.h"

namespace optimate::cuda::bench {

struct StageShape {
  const char* stage;
  double n = 0, k = 0;  // one layer's weight matrix, or lm_head
  double layers = 1;
};

// Runs `step` `reps` times with stage timing on; `tokens` rows go through each projection,
// `logits_rows` through lm_head.
inline nlohmann::json stage_breakdown(CudaModelRunner& runner, const ModelConfig& c,
                                      const std::function<void()>& step, int reps, double tokens,
                                      double logits_rows, double copy_gbs, double gemm_tflops) {
  runner.take_stage_times();
  runner.set_stage_timing(true);
  for (int i = 0; i < reps; ++i) step();
  runner.set_stage_timing(false);
  int64_t steps = 0;
  const auto times = runner.take_stage_times(&steps);
  const double L = static_cast<double>(c.num_layers), H = static_cast<double>(c.hidden_size);
  const double q = static_cast<double>(c.num_heads * c.head_dim), kv = static_cast<double>(c.num_kv_heads * c.head_dim);
  const double I = static_cast<double>(c.intermediate_size), V = static_cast<double>(c.vocab_size);
  const StageShape shapes[] = {{"qkv_proj", q + 2 * kv, H, L}, {"o_proj", H, q, L},
                               {"gate_up_proj", 2 * I, H, L}, {"down_proj", H, I, L},
                               {"lm_head", V, H, 1}};
  nlohmann::json out = nlohmann::json::array();
  double total = 0;
  for (const auto& [name, ms_sum] : times) total += ms_sum;
  for (const auto& [name, ms_sum] : times) {
    const double ms = ms_sum / std::max<int64_t>(1, steps);
    nlohmann::json e = {{"stage", name}, {"ms_per_step", ms}, {"share", ms_sum / total}};
    for (const StageShape& sh : shapes) {
      if (name != sh.stage) continue;
      const double m = name == "lm_head" ? logits_rows : tokens;
      const double flops = 2.0 * m * sh.n * sh.k * sh.layers;
      const double bytes = (sh.n * sh.k + m * (sh.n + sh.k)) * 2.0 * sh.layers;
      const double s = ms * 1e-3;
      e["tflop_per_s"] = flops / s / 1e12;
      e["gb_per_s"] = bytes / s / 1e9;
      // The time the slower ceiling allows, over the time taken.
      const double floor_s = std::max(flops / (gemm_tflops * 1e12), bytes / (copy_gbs * 1e9));
      e["fraction_of_roofline"] = floor_s / s;
    }
    out.push_back(e);
  }
  return {{"steps", steps}, {"ms_per_step", total / std::max<int64_t>(1, steps)}, {"stages", out}};
}

}  // namespace optimate::cuda::bench
