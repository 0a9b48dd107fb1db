// ModelConfig from a Hugging Face config.json (transformers 4.x "rope_scaling" and 5.x
// "rope_parameters" spellings both).
#include <cmath>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/model_config.h"

namespace optimate {
namespace {

using nlohmann::json;

const json* member(const json& j, std::string_view key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

int64_t int_field(const json& j, std::string_view key, const std::string& source,
                  std::optional<int64_t> fallback = std::nullopt) {
  const json* v = member(j, key);
  if (v == nullptr) {
    if (fallback) return *fallback;
    fail(ErrorCode::kInvalidFile, "{}: missing field '{}'", source, key);
  }
  if (!v->is_number_integer()) {
    fail(ErrorCode::kInvalidFile, "{}: field '{}' is not an integer", source, key);
  }
  return v->get<int64_t>();
}

// Read as float, the precision the model uses; values past float's range are errors.
float float_field(const json& j, std::string_view key, const std::string& source,
                  std::optional<double> fallback = std::nullopt) {
  const json* v = member(j, key);
  if (v == nullptr) {
    if (fallback) return static_cast<float>(*fallback);
    fail(ErrorCode::kInvalidFile, "{}: missing field '{}'", source, key);
  }
  if (!v->is_number()) fail(ErrorCode::kInvalidFile, "{}: field '{}' is not a number", source, key);
  const double d = v->get<double>();
  if (!(std::abs(d) <= std::numeric_limits<float>::max())) {
    fail(ErrorCode::kInvalidFile, "{}: field '{}' = {} is out of range", source, key, d);
  }
  return static_cast<float>(d);
}

bool bool_field(const json& j, std::string_view key, const std::string& source, bool fallback) {
  const json* v = member(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) fail(ErrorCode::kInvalidFile, "{}: field '{}' is not a bool", source, key);
  return v->get<bool>();
}

Architecture architecture_of(const json& j, const std::string& source, std::string* name) {
  if (const json* archs = member(j, "architectures");
      archs != nullptr && archs->is_array() && !archs->empty() && (*archs)[0].is_string()) {
    *name = (*archs)[0].get<std::string>();
  } else if (const json* type = member(j, "model_type"); type != nullptr && type->is_string()) {
    *name = type->get<std::string>();
  } else {
    fail(ErrorCode::kInvalidFile, "{}: neither 'architectures' nor 'model_type' is set", source);
  }
  std::string supported;
  for (const auto& [architecture, hf] : kHfArchitectureNames) {
    if (*name == hf.class_name || *name == hf.model_type) return architecture;
    supported += (supported.empty() ? "" : ", ") + std::string(hf.class_name);
  }
  fail(ErrorCode::kUnsupported, "{}: architecture '{}' is not supported ({} are)", source, *name, supported);
}

void read_rope(const json& j, const std::string& source, ModelConfig* c) {
  const json* params = member(j, "rope_parameters");
  if (params == nullptr) params = member(j, "rope_scaling");
  if (params != nullptr && !params->is_object()) {
    fail(ErrorCode::kInvalidFile, "{}: rope parameters are not an object", source);
  }
  float theta = float_field(j, "rope_theta", source, 10000.0);
  if (params != nullptr) theta = float_field(*params, "rope_theta", source, theta);
  c->rope_theta = theta;
  if (params == nullptr) return;
  const json* type = member(*params, "rope_type");
  if (type == nullptr) type = member(*params, "type");
  const std::string kind = type != nullptr && type->is_string() ? type->get<std::string>() : "default";
  RopeScaling& rs = c->rope_scaling;
  if (kind == "default") {
    rs.type = RopeScalingType::kNone;
  } else if (kind == "linear") {
    rs.type = RopeScalingType::kLinear;
    rs.factor = float_field(*params, "factor", source);
  } else if (kind == "llama3") {
    rs.type = RopeScalingType::kLlama3;
    rs.factor = float_field(*params, "factor", source);
    rs.low_freq_factor = float_field(*params, "low_freq_factor", source);
    rs.high_freq_factor = float_field(*params, "high_freq_factor", source);
    rs.original_max_position_embeddings =
        int_field(*params, "original_max_position_embeddings", source);
  } else {
    fail(ErrorCode::kUnsupported, "{}: rope scaling '{}' is not supported (linear and llama3 are)",
         source, kind);
  }
  if (const json* partial = member(*params, "partial_rotary_factor");
      partial != nullptr && !(partial->is_number() && partial->get<double>() == 1.0)) {
    fail(ErrorCode::kUnsupported, "{}: partial rotary embedding is not supported", source);
  }
}

// The experts of Qwen3-MoE (every layer sparse: mlp_only_layers and decoder_sparse_step would
// put dense MLPs between them, which is refused) and Mixtral (its intermediate_size is the
// experts'; it always renormalizes the top-k probabilities).
void read_moe(const json& j, const std::string& source, ModelConfig* c) {
  MoeConfig& moe = c->moe;
  // transformers 5 writes Qwen3-MoE's count as num_local_experts; the published configs say
  // num_experts.
  const char* count_key = member(j, "num_experts") != nullptr ? "num_experts" : "num_local_experts";
  moe.num_experts = int_field(j, count_key, source);
  moe.num_experts_per_tok = int_field(j, "num_experts_per_tok", source);
  if (c->architecture == Architecture::kMixtral) {
    moe.expert_intermediate_size = c->intermediate_size;
    moe.norm_topk_prob = true;
    return;
  }
  moe.expert_intermediate_size = int_field(j, "moe_intermediate_size", source);
  moe.norm_topk_prob = bool_field(j, "norm_topk_prob", source, false);
  if (const json* dense = member(j, "mlp_only_layers");
      dense != nullptr && !(dense->is_array() && dense->empty())) {
    fail(ErrorCode::kUnsupported, "{}: mlp_only_layers {} (dense MLPs between the sparse layers) is not "
         "supported", source, dense->dump());
  }
  if (const int64_t step = int_field(j, "decoder_sparse_step", source, 1); step != 1) {
    fail(ErrorCode::kUnsupported, "{}: decoder_sparse_step {} (dense MLPs between the sparse layers) is "
         "not supported", source, step);
  }
  if (int_field(j, "shared_expert_intermediate_size", source, 0) != 0) {
    fail(ErrorCode::kUnsupported, "{}: shared experts are not supported", source);
  }
}

}  // namespace

ModelConfig model_config_from_hf_json(const json& j, const std::string& source) {
  if (!j.is_object()) fail(ErrorCode::kInvalidFile, "{}: config is not a JSON object", source);
  ModelConfig c;
  c.architecture = architecture_of(j, source, &c.architecture_name);
  c.vocab_size = int_field(j, "vocab_size", source);
  c.hidden_size = int_field(j, "hidden_size", source);
  c.intermediate_size = int_field(j, "intermediate_size", source);
  c.num_layers = int_field(j, "num_hidden_layers", source);
  c.num_heads = int_field(j, "num_attention_heads", source);
  c.num_kv_heads = int_field(j, "num_key_value_heads", source, c.num_heads);
  if (c.num_heads <= 0) {
    fail(ErrorCode::kInvalidFile, "{}: num_attention_heads {} must be positive", source,
         c.num_heads);
  }
  c.head_dim = int_field(j, "head_dim", source, c.hidden_size / c.num_heads);
  c.max_position_embeddings = int_field(j, "max_position_embeddings", source);
  c.rms_norm_eps = float_field(j, "rms_norm_eps", source, 1e-6);
  read_rope(j, source, &c);
  c.tie_word_embeddings = bool_field(j, "tie_word_embeddings", source, false);
  if (const json* act = member(j, "hidden_act"); act != nullptr && *act != "silu") {
    fail(ErrorCode::kUnsupported, "{}: hidden_act {} is not supported (silu is)", source,
         act->dump());
  }
  if (bool_field(j, "mlp_bias", source, false)) {
    fail(ErrorCode::kUnsupported, "{}: mlp_bias is not supported", source);
  }
  c.qk_norm = c.architecture == Architecture::kQwen3 || c.architecture == Architecture::kQwen3Moe;
  if (c.architecture == Architecture::kQwen3Moe || c.architecture == Architecture::kMixtral) {
    read_moe(j, source, &c);
  }
  if (c.architecture == Architecture::kQwen2) {
    c.attention_bias = true;  // Qwen2 always has q/k/v biases and no o_proj bias
  } else if (bool_field(j, "attention_bias", source, false)) {
    fail(ErrorCode::kUnsupported, "{}: attention_bias (with an o_proj bias) is not supported for "
         "{}", source, c.architecture_name);
  }
  // Sliding-window attention is not implemented; a window no shorter than the context is
  // plain causal attention, so the context is limited to the window instead.
  const bool windowed = c.architecture == Architecture::kMistral ||
                        c.architecture == Architecture::kMixtral ||
                        bool_field(j, "use_sliding_window", source, false);
  if (windowed) {
    const int64_t window = int_field(j, "sliding_window", source, c.max_position_embeddings);
    if (window > 0 && window < c.max_position_embeddings) c.max_position_embeddings = window;
  }
  c.bos_token_id = int_field(j, "bos_token_id", source, -1);
  if (const json* eos = member(j, "eos_token_id")) {
    if (eos->is_array()) {
      for (const auto& e : *eos) {
        if (!e.is_number_integer()) {
          fail(ErrorCode::kInvalidFile, "{}: eos_token_id holds a non-integer", source);
        }
        c.eos_token_ids.push_back(e.get<int64_t>());
      }
    } else {
      c.eos_token_ids.push_back(int_field(j, "eos_token_id", source));
    }
  }
  c.validate(source);
  return c;
}

}  // namespace optimate
