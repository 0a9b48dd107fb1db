// The model's weights as the CPU runner uses them, with the projections that read the same
// input packed into one matrix so each layer runs two GEMMs on its normed input instead of five.
// Matrices stay in their file's quantization where the runner's kernels read it (Q8_0 and Q4_1
// for the fp32-activation kernels of quantized_linear.h; also Q4_0 and the K-quants for the
// integer kernels of q8_linear.h) unless the runner asks for fp32; everything else is fp32.
#pragma once

#include <vector>

#include "backend/cpu/quantized_linear.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace optimate::cpu {

// One expert of a mixture of experts, packed as a dense MLP is.
struct CpuExpert {
  CpuMatrix w_gate_up;  // (2 * expert_intermediate, hidden): gate rows, then up rows
  CpuMatrix w_down;     // (hidden, expert_intermediate)
};

struct CpuLayerWeights {
  std::vector<float> attn_norm;  // (hidden)
  CpuMatrix wqkv;                // (q_dim + 2 * kv_dim, hidden): wq rows, then wk, then wv
  std::vector<float> bqkv;       // (q_dim + 2 * kv_dim); empty without attention bias
  std::vector<float> q_norm;     // (head_dim); empty without q/k norms
  std::vector<float> k_norm;     // (head_dim)
  CpuMatrix wo;                  // (hidden, q_dim)
  std::vector<float> ffn_norm;   // (hidden)
  CpuMatrix w_gate_up;           // (2 * intermediate, hidden): gate rows, then up rows; empty with experts
  CpuMatrix w_down;              // (hidden, intermediate)
  // A mixture of experts: the router in fp32 whatever the file holds (it only picks experts, and
  // a rounded logit could pick others), and the experts.
  CpuMatrix router;              // (num_experts, hidden)
  std::vector<CpuExpert> experts;
};

struct CpuWeights {
  CpuMatrix tok_embeddings;      // (vocab, hidden)
  std::vector<float> final_norm;  // (hidden)
  CpuMatrix lm_head;             // (vocab, hidden); empty (0 rows) when tied to the embedding
  std::vector<CpuLayerWeights> layers;

  const CpuMatrix& lm_head_matrix() const {
    return lm_head.rows == 0 ? tok_embeddings : lm_head;
  }
  // Copies row `id` of the embedding, as fp32, to dst.
  void embedding_row(int64_t id, float* dst) const;
  int64_t bytes() const;
};

// Which matrices stay in their file's blocks: a type and row length the kernels read.
using KeepQuantized = bool (*)(DType dtype, int64_t cols);

// Checks every tensor's shape against `config` (Error(kInvalidFile) naming the tensor) and packs
// it; matrices `keep` accepts stay quantized, the rest (all of them when keep is null) are
// widened to fp32. repack_q8: quantized matrices are repacked for the integer kernels
// (q8_matrix.h) instead of keeping the file's blocks. vocab_rows: the rows of the embedding and
// LM head (a tensor-parallel rank's share of the vocabulary); 0: config.vocab_size.
CpuWeights pack_cpu_weights(const ModelConfig& config, const ModelWeights& weights,
                            KeepQuantized keep = keeps_quantized, bool repack_q8 = false,
                            int64_t vocab_rows = 0);

}  // namespace optimate::cpu
