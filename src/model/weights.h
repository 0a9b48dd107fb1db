// The weights of a Llama-family decoder, in the Hugging Face layout whatever the file format:
// Linear weights are [out_features, in_features]; rotary embedding is the "rotate half"
// (NeoX) form, so GGUF Llama Q/K weights, which llama.cpp stores permuted for interleaved
// rotary, are un-permuted at load time.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/setting_choices.h"  // LoadFormat
#include "model/host_tensor.h"
#include "model/model_config.h"

namespace optimate {

class GgufFile;

// One expert of a mixture-of-experts MLP (a SwiGLU MLP of the expert width). Views of the
// file's bytes whether it stores each expert apart or all of them in one stacked tensor.
struct ExpertWeights {
  HostTensor w_gate;  // (expert_intermediate, hidden)
  HostTensor w_up;    // (expert_intermediate, hidden)
  HostTensor w_down;  // (hidden, expert_intermediate)
};

struct LayerWeights {
  HostTensor attn_norm;  // (hidden)
  HostTensor wq;         // (num_heads * head_dim, hidden)
  HostTensor wk;         // (num_kv_heads * head_dim, hidden)
  HostTensor wv;         // (num_kv_heads * head_dim, hidden)
  HostTensor wo;         // (hidden, num_heads * head_dim)
  std::optional<HostTensor> bq, bk, bv;  // (rows of wq/wk/wv), Qwen2 only
  std::optional<HostTensor> q_norm, k_norm;  // (head_dim), Qwen3 only
  HostTensor ffn_norm;   // (hidden)
  // A dense MLP; empty in a mixture of experts.
  HostTensor w_gate;     // (intermediate, hidden)
  HostTensor w_up;       // (intermediate, hidden)
  HostTensor w_down;     // (hidden, intermediate)
  // A mixture of experts (config.is_moe()).
  HostTensor router;                   // (num_experts, hidden)
  std::vector<ExpertWeights> experts;  // (num_experts)
};

struct ModelWeights {
  HostTensor tok_embeddings;  // (vocab, hidden)
  HostTensor final_norm;      // (hidden)
  HostTensor lm_head;         // (vocab, hidden); the embedding itself when tied
  std::vector<LayerWeights> layers;
};

// Rows [row0, row0 + rows) of matrix `index` of a stacked [n, matrix rows, cols] tensor, as a
// 2-D view of its bytes (`name` names it in messages). The rows of a quantized tensor must be
// whole blocks, as every GGUF tensor's are.
HostTensor stacked_matrix(const HostTensor& t, int64_t index, int64_t row0, int64_t rows, std::string name);

struct LoadedModel {
  ModelConfig config;
  ModelWeights weights;
  std::string path;                    // what the user named
  std::shared_ptr<GgufFile> gguf;      // set when loaded from GGUF (tokenizer metadata lives here)
  std::string hf_dir;                  // set when loaded from a Hugging Face directory
};

// Loads a GGUF file or a Hugging Face directory (config.json + *.safetensors, sharded or not).
// Every tensor's shape is checked against the config; a missing tensor, wrong shape or
// unsupported architecture is an Error naming the file and tensor.
LoadedModel load_model(const std::string& path, LoadFormat format = LoadFormat::kAuto);
// The same model's configuration and metadata (GGUF key-values, the Hugging Face directory)
// without reading a tensor: what random "dummy" weights of the model's shape need.
LoadedModel load_model_header(const std::string& path, LoadFormat format = LoadFormat::kAuto);

}  // namespace optimate
