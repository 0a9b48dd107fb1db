// Step-time model of a backend: a roofline over the bytes a step must read (weights once per
// step, each sequence's KV) and the FLOPs it must do (2 per weight per token, the LM head on one
// row per sequence, plus attention),
// with a fixed overhead per step and per sequence. Its parameters come from a profile JSON
// (profiles/*.json), written by hand from physical figures or by `optimate bench --calibrate`.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace optimate::bench {

struct CostProfile {
  std::string name;
  std::string device;
  ModelConfig model;            // the shape being modelled (weights are never allocated)
  double weight_bits = 16.0;    // storage per weight: 16 for bf16, ~5 for Q4_1
  double kv_bytes_per_element = 2.0;
  double memory_bandwidth_bytes_per_s = 0.0;  // achievable copy bandwidth
  double peak_flops = 0.0;                    // achievable dense matmul FLOP/s
  // Matrix products on FP8 weights (optional: absent, peak_flops; Hopper's tensor cores run
  // e4m3 at twice their bf16 rate).
  double peak_fp8_flops = 0.0;
  // Set from the engine's configuration, not the profile file: FP8 weights (`quantization =
  // "fp8"`): every projection's weights one byte each and its products at peak_fp8_flops; the
  // LM head stays at weight_bits, as the CUDA backend keeps it.
  bool fp8_weights = false;
  // Fractions of those peaks that the backend's kernels reach.
  double gemm_bandwidth_efficiency = 1.0;
  double gemm_compute_efficiency = 1.0;
  double attention_bandwidth_efficiency = 1.0;
  // Attention FLOPs are not GEMMs on every backend (the CPU's run per token and head), so they
  // get their own share of the peak. Optional in a profile: absent, it is the GEMMs' share.
  double attention_compute_efficiency = 1.0;
  // The share of the copy bandwidth attention reaches over quantized KV blocks (fp8, int8,
  // int4: codes to convert and scales to apply). Optional: absent, attention_bandwidth_efficiency.
  double quantized_attention_bandwidth_efficiency = 0.0;
  // The same over int4 blocks, whose codes take more work per byte to unpack. Optional:
  // absent, quantized_attention_bandwidth_efficiency.
  double int4_attention_bandwidth_efficiency = 0.0;
  double step_overhead_s = 0.0;     // launch, scheduling and sampling per step
  double per_seq_overhead_s = 0.0;  // per sequence in the step (sampling, bookkeeping)
  // Between GPU memory and pinned host memory, each way (swap preemption and the host tier of
  // the prefix cache). Optional in a profile: 0 (absent) gives the simulated engine no host tier.
  double host_link_bytes_per_s = 0.0;
  int64_t num_kv_blocks = 0;        // KV cache capacity the engine gets
  int64_t block_size = 16;
  std::map<std::string, std::string> sources;  // where each number comes from
};

// One sequence's share of a step.
struct SeqWork {
  int64_t num_new_tokens = 0;  // prefill chunk length, or 1 for a decode
  int64_t context_len = 0;     // tokens already in the cache before this step
  // The context's KV bytes when its blocks' precisions are known (a cache that mixes them):
  // at full precision, and quantized. Negative: context_len tokens at the profile's precision.
  double full_context_bytes = -1.0;
  double quantized_context_bytes = 0.0;  // fp8 and int8 blocks
  double int4_context_bytes = 0.0;
};

struct StepCost {
  double weight_bytes = 0.0;
  double kv_bytes = 0.0;      // KV read and written
  double gemm_flops = 0.0;
  double attention_flops = 0.0;
  double seconds = 0.0;
};

class CostModel {
 public:
  explicit CostModel(CostProfile profile);
  const CostProfile& profile() const { return profile_; }
  StepCost step_cost(const std::vector<SeqWork>& seqs) const;
  // Weights read by one step: every matrix except the embedding table (a row gather).
  double weight_bytes_per_step() const { return weight_bytes_; }
  double kv_bytes_per_token() const { return kv_bytes_per_token_; }
  // Tokens in a step past which its matrix products take longer to compute than to read their
  // weights (the roofline's ridge, LM head aside): steps wider than this are compute-bound.
  double ridge_tokens() const;
  // The weights one step reads through matrix products (the LM head included).
  static double matmul_params(const ModelConfig& m);

 private:
  CostProfile profile_;
  double weight_bytes_ = 0.0;
  double projection_flops_per_s_ = 0.0;  // the layers' products (FP8 ones at peak_fp8_flops)
  double matmul_params_ = 0.0;   // weights read each step, LM head included
  double lm_head_params_ = 0.0;  // of which the LM head, applied to one row per sequence
  double kv_bytes_per_token_ = 0.0;
};

// Reads and validates a profile (Error(kInvalidFile) naming the file and field).
CostProfile load_cost_profile(const std::string& path);
std::string cost_profile_to_json(const CostProfile& profile);

}  // namespace optimate::bench
