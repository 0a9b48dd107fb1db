// ModelConfig from GGUF metadata, under llama.cpp's key names ("<arch>.block_count", ...).
#include <cmath>
#include <limits>

#include "core/error.h"
#include "model/gguf_file.h"
#include "model/model_config.h"

namespace optimate {
namespace {

class ArchKeys {
 public:
  ArchKeys(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}

  std::string key(std::string_view suffix) const { return arch_ + "." + std::string(suffix); }

  int64_t required_int(std::string_view suffix) const {
    const std::string k = key(suffix);
    if (f_.find(k) == nullptr) fail(ErrorCode::kInvalidFile, "'{}': missing key '{}'", f_.name(), k);
    return f_.get_int(k, 0);
  }
  int64_t get_int(std::string_view suffix, int64_t fallback) const {
    return f_.get_int(key(suffix), fallback);
  }
  // As float, the precision the model uses; values past float's range are errors.
  float get_float(std::string_view suffix, double fallback) const {
    const double v = f_.get_float(key(suffix), fallback);
    if (!(std::abs(v) <= std::numeric_limits<float>::max())) {
      fail(ErrorCode::kInvalidFile, "'{}': key '{}' = {} is out of range", f_.name(), key(suffix), v);
    }
    return static_cast<float>(v);
  }
  bool get_bool(std::string_view suffix, bool fallback) const {
    const GgufValue* v = f_.find(key(suffix));
    if (v == nullptr) return fallback;
    if (v->type != GgufType::kBool) fail(ErrorCode::kInvalidFile, "'{}': key '{}' is not a bool", f_.name(), key(suffix));
    return v->as_bool();
  }
  std::string get_string(std::string_view suffix, std::string_view fallback) const {
    return f_.get_string(key(suffix), fallback);
  }

 private:
  const GgufFile& f_;
  std::string arch_;
};

int64_t vocab_size_of(const GgufFile& f, const ArchKeys& keys) {
  if (f.has_tensor("token_embd.weight")) {
    const auto& shape = f.tensor("token_embd.weight").shape;
    if (shape.size() == 2) return shape[0];
  }
  if (const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
      tokens != nullptr && tokens->type == GgufType::kArray &&
      tokens->elem_type == GgufType::kString) {
    return static_cast<int64_t>(tokens->as_strings().size());
  }
  return keys.required_int("vocab_size");
}

void read_rope_scaling(const GgufFile& f, const ArchKeys& keys, ModelConfig* c) {
  RopeScaling& rs = c->rope_scaling;
  const std::string type = keys.get_string("rope.scaling.type", "none");
  const float linear_factor = keys.get_float("rope.scale_linear", 0.0);
  if (type == "linear" || (type == "none" && linear_factor > 0.0f && linear_factor != 1.0f)) {
    rs.type = RopeScalingType::kLinear;
    rs.factor = keys.get_float("rope.scaling.factor", linear_factor);
  } else if (type != "none") {
    fail(ErrorCode::kUnsupported, "'{}': rope scaling '{}' is not supported (linear is)", f.name(),
         type);
  }
  if (f.has_tensor("rope_freqs.weight")) {
    if (rs.type != RopeScalingType::kNone) {
      fail(ErrorCode::kUnsupported, "'{}': rope_freqs.weight together with {} rope scaling",
           f.name(), type);
    }
    const HostTensor factors = f.tensor("rope_freqs.weight");
    if (factors.dtype != DType::kF32 || factors.num_elems() != c->head_dim / 2) {
      fail(ErrorCode::kInvalidFile, "'{}': rope_freqs.weight must hold {} F32 values", f.name(),
           c->head_dim / 2);
    }
    rs.type = RopeScalingType::kFreqFactors;
    rs.freq_factors = to_f32(factors);
  }
}

// llama.cpp's expert keys. Mixtral is written as `llama` with experts, their width the
// feed-forward length; Qwen3-MoE has its own expert width. Both renormalize the top-k weights
// in llama.cpp (its graph for these architectures passes norm_w = true) unless the file says
// otherwise.
void read_experts(const GgufFile& f, const ArchKeys& keys, ModelConfig* c) {
  const int64_t experts = keys.get_int("expert_count", 0);
  if (experts == 0) {
    if (c->architecture == Architecture::kQwen3Moe)
      fail(ErrorCode::kInvalidFile, "'{}': missing key '{}'", f.name(), keys.key("expert_count"));
    return;
  }
  if (c->architecture == Architecture::kLlama) c->architecture = Architecture::kMixtral;
  if (c->architecture != Architecture::kMixtral && c->architecture != Architecture::kQwen3Moe)
    fail(ErrorCode::kUnsupported, "'{}': experts in a {} model are not supported", f.name(),
         c->architecture_name);
  if (keys.get_int("expert_shared_count", 0) != 0)
    fail(ErrorCode::kUnsupported, "'{}': shared experts are not supported", f.name());
  MoeConfig& moe = c->moe;
  moe.num_experts = experts;
  moe.num_experts_per_tok = keys.required_int("expert_used_count");
  moe.expert_intermediate_size = c->architecture == Architecture::kQwen3Moe
                                     ? keys.required_int("expert_feed_forward_length")
                                     : keys.get_int("expert_feed_forward_length", c->intermediate_size);
  moe.norm_topk_prob = keys.get_bool("expert_weights_norm", true);
}

}  // namespace

ModelConfig model_config_from_gguf(const GgufFile& f) {
  ModelConfig c;
  c.architecture_name = f.get_string("general.architecture", "");
  if (c.architecture_name.empty()) {
    fail(ErrorCode::kInvalidFile, "'{}': missing key 'general.architecture'", f.name());
  }
  const std::string& arch = c.architecture_name;
  if (arch == "llama") {
    c.architecture = Architecture::kLlama;  // kMixtral below when it has experts
  } else if (arch == "mistral") {
    c.architecture = Architecture::kMistral;
  } else if (arch == "qwen2") {
    c.architecture = Architecture::kQwen2;
    c.attention_bias = true;
  } else if (arch == "qwen3") {
    c.architecture = Architecture::kQwen3;
  } else if (arch == "qwen3moe") {
    c.architecture = Architecture::kQwen3Moe;
  } else {
    fail(ErrorCode::kUnsupported, "'{}': architecture '{}' is not supported (llama, mistral, qwen2, "
         "qwen3 and qwen3moe are)", f.name(), arch);
  }
  const ArchKeys keys(f, c.architecture_name);
  c.num_layers = keys.required_int("block_count");
  c.hidden_size = keys.required_int("embedding_length");
  c.intermediate_size = keys.required_int("feed_forward_length");
  c.num_heads = keys.required_int("attention.head_count");
  c.num_kv_heads = keys.get_int("attention.head_count_kv", c.num_heads);
  // What the head size is derived from comes first, so an error names the key that is wrong.
  for (const auto& [value, key] : {std::pair{c.hidden_size, "embedding_length"}, std::pair{c.num_heads, "attention.head_count"}}) {
    if (value <= 0) fail(ErrorCode::kInvalidFile, "'{}': {} must be positive, got {}", f.name(), keys.key(key), value);
  }
  c.head_dim = keys.get_int("attention.key_length", c.hidden_size / c.num_heads);
  if (keys.get_int("attention.value_length", c.head_dim) != c.head_dim) {
    fail(ErrorCode::kUnsupported, "'{}': key and value head sizes differ", f.name());
  }
  const int64_t rotary_dims = keys.get_int("rope.dimension_count", c.head_dim);
  if (rotary_dims != c.head_dim) {
    fail(ErrorCode::kUnsupported, "'{}': {} = {} (partial rotary embedding) is not supported; "
         "head size is {}", f.name(), keys.key("rope.dimension_count"), rotary_dims, c.head_dim);
  }
  c.max_position_embeddings = keys.required_int("context_length");
  c.rms_norm_eps = keys.get_float("attention.layer_norm_rms_epsilon", 0.0);
  if (f.find(keys.key("attention.layer_norm_rms_epsilon")) == nullptr) {
    fail(ErrorCode::kInvalidFile, "'{}': missing key '{}'", f.name(),
         keys.key("attention.layer_norm_rms_epsilon"));
  }
  c.rope_theta = keys.get_float("rope.freq_base", 10000.0);
  read_rope_scaling(f, keys, &c);
  c.vocab_size = vocab_size_of(f, keys);
  c.qk_norm = c.architecture == Architecture::kQwen3 || c.architecture == Architecture::kQwen3Moe;
  read_experts(f, keys, &c);
  c.tie_word_embeddings = !f.has_tensor("output.weight");
  c.bos_token_id = f.get_int("tokenizer.ggml.bos_token_id", -1);
  if (f.find("tokenizer.ggml.eos_token_id") != nullptr) {
    c.eos_token_ids.push_back(f.get_int("tokenizer.ggml.eos_token_id", 0));
  }
  // llama.cpp also stops at the end-of-turn token (Llama 3's <|eot_id|>).
  if (const int64_t eot = f.get_int("tokenizer.ggml.eot_token_id", -1);
      eot >= 0 && (c.eos_token_ids.empty() || c.eos_token_ids[0] != eot)) {
    c.eos_token_ids.push_back(eot);
  }
  c.validate("'" + f.name() + "'");
  return c;
}

}  // namespace optimate
