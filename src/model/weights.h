// The weights of a Llama-family decoder, in the Hugging Face layout whatever the file format:
// Linear weights are [out_features, in_features]; rotary embedding is the "rotate half"
// (NeoX) form, so GGUF Llama Q/K weights, which llama.cpp stores permuted for interleaved
// rotary, are un-permuted at load time.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/host_tensor.h"
#include "model/model_config.h"

namespace optimate {

class GgufFile;

struct LayerWeights {
  HostTensor attn_norm;  // (hidden)
  HostTensor wq;         // (num_heads * head_dim, hidden)
  HostTensor wk;         // (num_kv_heads * head_dim, hidden)
  HostTensor wv;         // (num_kv_heads * head_dim, hidden)
  HostTensor wo;         // (hidden, num_heads * head_dim)
  std::optional<HostTensor> bq, bk, bv;  // (rows of wq/wk/wv), Qwen2 only
  HostTensor ffn_norm;   // (hidden)
  HostTensor w_gate;     // (intermediate, hidden)
  HostTensor w_up;       // (intermediate, hidden)
  HostTensor w_down;     // (hidden, intermediate)
};

struct ModelWeights {
  HostTensor tok_embeddings;  // (vocab, hidden)
  HostTensor final_norm;      // (hidden)
  HostTensor lm_head;         // (vocab, hidden); the embedding itself when tied
  std::vector<LayerWeights> layers;
};

enum class LoadFormat { kAuto, kGguf, kSafetensors };

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
