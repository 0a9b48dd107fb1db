// The shape and hyper-parameters of a Llama-family decoder (dense or mixture-of-experts), read
// from a Hugging Face config.json or from GGUF metadata.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace optimate {

class GgufFile;

enum class Architecture {
  kLlama,    // Llama 2, Llama 3, SmolLM2 (LlamaForCausalLM)
  kMistral,  // MistralForCausalLM (Llama layout; sliding window unsupported beyond max len)
  kQwen2,    // Qwen2ForCausalLM: bias on q/k/v projections
  kQwen3,    // Qwen3ForCausalLM: RMSNorm over each query and key head before rotary embedding
  kQwen3Moe,  // Qwen3MoeForCausalLM: Qwen3's attention, a mixture of experts in every layer
  kMixtral,  // MixtralForCausalLM (GGUF: llama with experts): Llama's attention, experts
};

// Hugging Face's names for an architecture: config.json's `architectures` entry (the model
// class) and its `model_type`.
struct HfArchitectureName {
  const char* class_name;
  const char* model_type;
};
inline constexpr struct {
  Architecture architecture;
  HfArchitectureName name;
} kHfArchitectureNames[] = {
    {Architecture::kLlama, {"LlamaForCausalLM", "llama"}},
    {Architecture::kMistral, {"MistralForCausalLM", "mistral"}},
    {Architecture::kQwen2, {"Qwen2ForCausalLM", "qwen2"}},
    {Architecture::kQwen3, {"Qwen3ForCausalLM", "qwen3"}},
    {Architecture::kQwen3Moe, {"Qwen3MoeForCausalLM", "qwen3_moe"}},
    {Architecture::kMixtral, {"MixtralForCausalLM", "mixtral"}},
};
HfArchitectureName hf_architecture_name(Architecture architecture);

// kFreqFactors: per-frequency divisors stored with the weights (GGUF's rope_freqs.weight, which
// llama.cpp's converter writes for Llama 3.1+ instead of the llama3 parameters).
enum class RopeScalingType { kNone, kLinear, kLlama3, kFreqFactors };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
  std::vector<float> freq_factors;                   // kFreqFactors: head_dim/2 divisors
};

// The MLP of a mixture-of-experts layer: a router (a linear map to one logit per expert), a
// softmax over the experts, the top `num_experts_per_tok` of them, each a SwiGLU MLP of width
// `expert_intermediate_size`, summed with their probabilities as weights (renormalized to sum to
// one over the chosen experts when `norm_topk_prob`). No shared experts: the architectures read
// here (Qwen3-MoE, Mixtral) have none, and a config that has them is refused.
struct MoeConfig {
  int64_t num_experts = 0;  // 0: a dense MLP
  int64_t num_experts_per_tok = 0;
  int64_t expert_intermediate_size = 0;
  bool norm_topk_prob = true;
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string architecture_name;  // as written in the file, for messages
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2)
  bool qk_norm = false;         // RMSNorm (weights of head_dim) on each q and k head (Qwen3)
  MoeConfig moe;                // every layer's MLP when moe.num_experts > 0
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;

  bool is_moe() const { return moe.num_experts > 0; }
  // The width of a layer's MLP: an expert's in a mixture of experts, else intermediate_size.
  int64_t mlp_width() const { return is_moe() ? moe.expert_intermediate_size : intermediate_size; }
  // Parameters of the whole model, and those one token's forward pass reads (the routed experts
  // only): what memory plans and bandwidth figures count.
  int64_t num_parameters() const;
  int64_t num_active_parameters() const;

  // Checks ranges and consistency (heads divide hidden, kv heads divide heads, sizes below
  // sane limits); throws Error(kInvalidFile) naming `source` and the field.
  void validate(const std::string& source) const;
};

// config.json of a Hugging Face model directory. Unknown architectures are Error(kUnsupported).
ModelConfig model_config_from_hf_json(const nlohmann::json& j, const std::string& source);
ModelConfig model_config_from_gguf(const GgufFile& gguf);

// Inverse frequencies of rotary embedding, head_dim/2 entries, scaling applied.
std::vector<float> rope_inv_freq(const ModelConfig& config);

}  // namespace optimate
