// Where each weight lives inside the one device allocation that holds a model. The loader
// and the dummy initialiser both follow this layout, so they produce identical buffers.
// Fused tensors are contiguous runs of their parts: wqkv = [wq; wk; wv] rows, bqkv likewise,
// w_gate_up = [w_gate; w_up] rows, so one GEMM computes each group. A mixture of experts stacks
// its experts: kExpertsGateUp [num_experts, 2 * expert_inter, hidden] (each expert's gate rows,
// then its up rows) and kExpertsDown [num_experts, hidden, expert_inter], one grouped GEMM each.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace optimate::cuda {

enum class WeightPart : uint8_t {
  kEmbed, kFinalNorm, kLmHead,
  kAttnNorm, kWq, kWk, kWv, kBq, kBk, kBv, kWo, kFfnNorm, kGate, kUp, kDown,
  kQNorm, kKNorm, kRouter, kExpertsGateUp, kExpertsDown,
};

struct WeightSegment {
  WeightPart part;
  int64_t layer;                // -1 for model-level tensors
  int64_t offset;               // in bf16 elements from the start of the allocation
  std::vector<int64_t> shape;   // PyTorch order
  int64_t num_elems() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  // Identifies the tensor for the seeded dummy values, stable across configs.
  uint32_t tensor_id() const {
    return static_cast<uint32_t>((layer + 1) * 32 + static_cast<int>(part));
  }
};

struct WeightLayout {
  std::vector<WeightSegment> segments;
  int64_t total_elems = 0;
  const WeightSegment& find(WeightPart part, int64_t layer) const;
};

// The lm_head segment is absent when embeddings are tied (it aliases kEmbed).
WeightLayout weight_layout(const ModelConfig& config);

}  // namespace optimate::cuda
