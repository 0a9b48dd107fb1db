// A small Llama-family model with seeded random weights, for runner tests that need no file.
#pragma once

#include <random>
#include <string>

#include "model/host_tensor.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace optimate::testing {

inline ModelConfig tiny_config(bool attention_bias = false) {
  ModelConfig c;
  c.architecture = attention_bias ? Architecture::kQwen2 : Architecture::kLlama;
  c.architecture_name = attention_bias ? "qwen2" : "llama";
  c.vocab_size = 101;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 512;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.tie_word_embeddings = !attention_bias;
  c.attention_bias = attention_bias;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

// The same with heads, KV heads and MLP features that divide by 2 and 4 (tensor parallelism),
// and a vocabulary (101) that divides by neither.
inline ModelConfig tiny_splittable_config(bool attention_bias = false) {
  ModelConfig c = tiny_config(attention_bias);
  c.hidden_size = 128;
  c.intermediate_size = 128;
  c.num_heads = 8;
  c.num_kv_heads = 4;
  return c;
}

// tiny_splittable_config as a Qwen3-MoE: q/k norms, 8 experts of 128 features, top-2,
// renormalized (heads, KV heads and expert features divide by 2 and 4, the features into whole
// 32-element blocks).
inline ModelConfig tiny_moe_config() {
  ModelConfig c = tiny_splittable_config(false);
  c.architecture = Architecture::kQwen3Moe;
  c.architecture_name = "qwen3moe";
  c.qk_norm = true;
  c.moe = {.num_experts = 8, .num_experts_per_tok = 2, .expert_intermediate_size = 128, .norm_topk_prob = true};
  return c;
}

inline ModelWeights tiny_weights(const ModelConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random = [&](std::string name, std::vector<int64_t> shape, float scale, float offset = 0.0f) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(n);
    for (float& x : v) x = offset + scale * normal(rng);
    return make_f32_tensor(std::move(name), std::move(shape), std::move(v));
  };
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  ModelWeights w;
  w.tok_embeddings = random("tok_embeddings", {c.vocab_size, h}, 1.0f);
  w.final_norm = random("final_norm", {h}, 0.1f, 1.0f);
  w.lm_head = c.tie_word_embeddings ? w.tok_embeddings : random("lm_head", {c.vocab_size, h}, 0.2f);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerWeights lw;
    lw.attn_norm = random(p + "attn_norm", {h}, 0.1f, 1.0f);
    lw.wq = random(p + "wq", {q, h}, 0.15f);
    lw.wk = random(p + "wk", {kv, h}, 0.15f);
    lw.wv = random(p + "wv", {kv, h}, 0.15f);
    lw.wo = random(p + "wo", {h, q}, 0.15f);
    if (c.attention_bias) {
      lw.bq = random(p + "bq", {q}, 0.1f);
      lw.bk = random(p + "bk", {kv}, 0.1f);
      lw.bv = random(p + "bv", {kv}, 0.1f);
    }
    lw.ffn_norm = random(p + "ffn_norm", {h}, 0.1f, 1.0f);
    if (c.qk_norm) {
      lw.q_norm = random(p + "q_norm", {c.head_dim}, 0.1f, 1.0f);
      lw.k_norm = random(p + "k_norm", {c.head_dim}, 0.1f, 1.0f);
    }
    if (c.is_moe()) {
      const int64_t inter = c.moe.expert_intermediate_size;
      lw.router = random(p + "router", {c.moe.num_experts, h}, 0.3f);
      for (int64_t e = 0; e < c.moe.num_experts; ++e) {
        const std::string x = p + "experts." + std::to_string(e) + ".";
        lw.experts.push_back({random(x + "gate", {inter, h}, 0.15f), random(x + "up", {inter, h}, 0.15f),
                              random(x + "down", {h, inter}, 0.15f)});
      }
      w.layers.push_back(std::move(lw));
      continue;
    }
    lw.w_gate = random(p + "w_gate", {c.intermediate_size, h}, 0.15f);
    lw.w_up = random(p + "w_up", {c.intermediate_size, h}, 0.15f);
    lw.w_down = random(p + "w_down", {h, c.intermediate_size}, 0.15f);
    w.layers.push_back(std::move(lw));
  }
  return w;
}

}  // namespace optimate::testing
