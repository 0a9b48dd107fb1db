// Shared pieces of the weight loaders (weights_gguf.cpp, weights_hf.cpp): a name -> tensor
// lookup per file format, and the assembly of ModelWeights with every shape checked.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "model/weights.h"

namespace optimate {

// Where tensors come from. `get` returns nullopt for an absent tensor; `where` names the file a
// tensor would live in, for messages.
struct TensorSource {
  std::function<std::optional<HostTensor>(const std::string& name)> get;
  std::function<std::string(const std::string& name)> where;
};

// The tensor names of one file format, e.g. "blk.{}.attn_q.weight" vs
// "model.layers.{}.self_attn.q_proj.weight"; {} is the layer index.
struct TensorNames {
  std::string tok_embeddings, final_norm, lm_head;
  std::string attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm, ffn_norm, w_gate, w_up, w_down;
  // Mixtures of experts. The router, then the experts in one of three layouts, tried in turn:
  // stacked per projection ([num_experts, rows, cols]: GGUF's ffn_*_exps); gate and up stacked
  // together ([num_experts, 2 * inter, hidden], gate rows first) with down stacked
  // (transformers' in-memory layout); one tensor per expert ({0} the layer, {1} the expert).
  // An empty name is a layout the format does not have.
  std::string router;
  std::string experts_gate, experts_up, experts_down;
  std::string experts_gate_up, experts_down_fused;
  std::string expert_gate, expert_up, expert_down;
};

// Fetches every tensor `config` calls for, checks shapes and dtypes, and applies `fix_q`/`fix_k`
// (when set) to each layer's Q/K weights. Missing tensors and wrong shapes throw Error naming
// the file and tensor.
ModelWeights assemble_weights(const ModelConfig& config, const TensorSource& source,
                              const TensorNames& names,
                              const std::function<HostTensor(HostTensor)>& fix_q = {},
                              const std::function<HostTensor(HostTensor)>& fix_k = {});

// with_weights false: the configuration and metadata only (load_model_header).
LoadedModel load_gguf_model(const std::string& path, bool with_weights = true);
LoadedModel load_hf_model(const std::string& dir, bool with_weights = true);

// Reorders the rows of a Q or K projection stored for interleaved rotary (llama.cpp's
// converter) into the rotate-half order of Hugging Face. Quantized rows move whole, so the
// result keeps the tensor's dtype, in an owned buffer.
HostTensor unpermute_rotary_rows(const HostTensor& t, int64_t num_heads);

}  // namespace optimate
