// The model's weights as the CPU runner uses them: fp32, with the projections that read the same
// input packed into one matrix so each layer runs two GEMMs on its normed input instead of five.
#pragma once

#include <vector>

#include "model/model_config.h"
#include "model/weights.h"

namespace optimate::cpu {

struct CpuLayerWeights {
  std::vector<float> attn_norm;  // (hidden)
  std::vector<float> wqkv;       // (q_dim + 2 * kv_dim, hidden): wq rows, then wk, then wv
  std::vector<float> bqkv;       // (q_dim + 2 * kv_dim); empty without attention bias
  std::vector<float> wo;         // (hidden, q_dim)
  std::vector<float> ffn_norm;   // (hidden)
  std::vector<float> w_gate_up;  // (2 * intermediate, hidden): gate rows, then up rows
  std::vector<float> w_down;     // (hidden, intermediate)
};

struct CpuWeights {
  std::vector<float> tok_embeddings;  // (vocab, hidden)
  std::vector<float> final_norm;      // (hidden)
  std::vector<float> lm_head;         // (vocab, hidden); empty when tied to the embedding
  std::vector<CpuLayerWeights> layers;

  const float* lm_head_data() const {
    return lm_head.empty() ? tok_embeddings.data() : lm_head.data();
  }
};

// Checks every tensor's shape against `config` (Error(kInvalidFile) naming the tensor) and
// dequantizes it to fp32.
CpuWeights pack_cpu_weights(const ModelConfig& config, const ModelWeights& weights);

}  // namespace optimate::cpu
