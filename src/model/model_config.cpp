// ModelConfig::validate and the rotary frequencies.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"
#include "model/model_config.h"

namespace optimate {
namespace {

void check_range(const std::string& source, std::string_view field, int64_t v, int64_t lo,
                 int64_t hi) {
  if (v < lo || v > hi) {
    fail(ErrorCode::kInvalidFile, "{}: {} = {} is outside [{}, {}]", source, field, v, lo, hi);
  }
}

}  // namespace

void ModelConfig::validate(const std::string& source) const {
  check_range(source, "vocab_size", vocab_size, 1, int64_t{1} << 22);
  check_range(source, "hidden_size", hidden_size, 1, 1 << 16);
  check_range(source, "intermediate_size", intermediate_size, 1, 1 << 18);
  check_range(source, "num_hidden_layers", num_layers, 1, 1024);
  check_range(source, "num_attention_heads", num_heads, 1, 1024);
  check_range(source, "num_key_value_heads", num_kv_heads, 1, num_heads);
  check_range(source, "head_dim", head_dim, 2, 1024);
  check_range(source, "max_position_embeddings", max_position_embeddings, 1, int64_t{1} << 24);
  if (num_heads % num_kv_heads != 0) {
    fail(ErrorCode::kInvalidFile, "{}: num_attention_heads {} is not a multiple of "
         "num_key_value_heads {}", source, num_heads, num_kv_heads);
  }
  if (head_dim % 2 != 0) {
    fail(ErrorCode::kInvalidFile, "{}: head_dim {} must be even for rotary embedding", source,
         head_dim);
  }
  if (!(rms_norm_eps > 0.0f && rms_norm_eps < 1.0f)) {
    fail(ErrorCode::kInvalidFile, "{}: rms_norm_eps {} is outside (0, 1)", source, rms_norm_eps);
  }
  if (!(rope_theta > 1.0f && std::isfinite(rope_theta))) {
    fail(ErrorCode::kInvalidFile, "{}: rope_theta {} must be a finite number above 1", source,
         rope_theta);
  }
  const RopeScaling& rs = rope_scaling;
  if (rs.type != RopeScalingType::kNone && rs.type != RopeScalingType::kFreqFactors &&
      !(rs.factor >= 1.0f && rs.factor <= 1024.0f)) {
    fail(ErrorCode::kInvalidFile, "{}: rope scaling factor {} is outside [1, 1024]", source,
         rs.factor);
  }
  if (rs.type == RopeScalingType::kLlama3) {
    if (!(rs.low_freq_factor > 0.0f && rs.high_freq_factor > rs.low_freq_factor)) {
      fail(ErrorCode::kInvalidFile, "{}: llama3 rope scaling needs 0 < low_freq_factor ({}) < "
           "high_freq_factor ({})", source, rs.low_freq_factor, rs.high_freq_factor);
    }
    check_range(source, "original_max_position_embeddings", rs.original_max_position_embeddings,
                1, int64_t{1} << 24);
  }
  if (rs.type == RopeScalingType::kFreqFactors) {
    if (static_cast<int64_t>(rs.freq_factors.size()) != head_dim / 2) {
      fail(ErrorCode::kInvalidFile, "{}: {} rope frequency factors for head_dim {}", source,
           rs.freq_factors.size(), head_dim);
    }
    for (float f : rs.freq_factors) {
      if (!(f > 0.0f && std::isfinite(f))) {
        fail(ErrorCode::kInvalidFile, "{}: rope frequency factor {} is not positive", source, f);
      }
    }
  }
  if (is_moe()) {
    check_range(source, "num_experts", moe.num_experts, 1, 4096);
    check_range(source, "num_experts_per_tok", moe.num_experts_per_tok, 1, std::min<int64_t>(moe.num_experts, 64));
    check_range(source, "moe_intermediate_size", moe.expert_intermediate_size, 1, 1 << 18);
  }
  check_range(source, "bos_token_id", bos_token_id, -1, vocab_size - 1);
  for (int64_t id : eos_token_ids) check_range(source, "eos_token_id", id, 0, vocab_size - 1);
}

HfArchitectureName hf_architecture_name(Architecture architecture) {
  for (const auto& [a, name] : kHfArchitectureNames)
    if (a == architecture) return name;
  fail(ErrorCode::kInternal, "architecture {} has no Hugging Face name", static_cast<int>(architecture));
}

namespace {

// One layer's parameters: attention (with its biases and q/k norms), the norms, and the MLP
// with `experts` of the model's experts (all of a dense MLP).
int64_t layer_parameters(const ModelConfig& c, int64_t experts) {
  const int64_t h = c.hidden_size, q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
  int64_t n = h * (q_dim + 2 * kv_dim) + q_dim * h + 2 * h;
  if (c.attention_bias) n += q_dim + 2 * kv_dim;
  if (c.qk_norm) n += 2 * c.head_dim;
  if (!c.is_moe()) return n + 3 * h * c.intermediate_size;
  return n + c.moe.num_experts * h + experts * 3 * h * c.moe.expert_intermediate_size;
}

int64_t model_parameters(const ModelConfig& c, int64_t experts) {
  const int64_t embeddings = c.vocab_size * c.hidden_size * (c.tie_word_embeddings ? 1 : 2);
  return embeddings + c.hidden_size + c.num_layers * layer_parameters(c, experts);
}

}  // namespace

int64_t ModelConfig::num_parameters() const { return model_parameters(*this, moe.num_experts); }

int64_t ModelConfig::num_active_parameters() const {
  return model_parameters(*this, moe.num_experts_per_tok);
}

// Mirrors transformers' modeling_rope_utils (default, linear and _compute_llama3_parameters)
// operation by operation in fp32, as torch evaluates it: `scalar / tensor` is
// `reciprocal(tensor) * scalar`, and Python scalars are rounded to fp32 first.
std::vector<float> rope_inv_freq(const ModelConfig& config) {
  const int64_t dim = config.head_dim;
  const float base = config.rope_theta;
  std::vector<float> inv_freq(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv_freq[i] = 1.0f / std::pow(base, exponent);
  }
  const RopeScaling& rs = config.rope_scaling;
  switch (rs.type) {
    case RopeScalingType::kNone: break;
    case RopeScalingType::kLinear:
      for (float& f : inv_freq) f = f / rs.factor;
      break;
    case RopeScalingType::kFreqFactors:
      // llama.cpp divides each rotation angle by its factor.
      for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = inv_freq[i] / rs.freq_factors[i];
      break;
    case RopeScalingType::kLlama3: {
      const double old_context_len = static_cast<double>(rs.original_max_position_embeddings);
      const auto low_freq_wavelen = static_cast<float>(old_context_len / rs.low_freq_factor);
      const auto high_freq_wavelen = static_cast<float>(old_context_len / rs.high_freq_factor);
      const auto two_pi = static_cast<float>(2.0 * std::numbers::pi);
      const auto factor_span =
          static_cast<float>(static_cast<double>(rs.high_freq_factor) - rs.low_freq_factor);
      for (float& f : inv_freq) {
        const float wavelen = (1.0f / f) * two_pi;
        const float llama = wavelen > low_freq_wavelen ? f / rs.factor : f;
        const float smooth =
            ((1.0f / wavelen) * static_cast<float>(old_context_len) - rs.low_freq_factor) /
            factor_span;
        const float smoothed = (1.0f - smooth) * llama / rs.factor + smooth * llama;
        const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
        f = medium ? smoothed : llama;
      }
      break;
    }
  }
  return inv_freq;
}

}  // namespace optimate
