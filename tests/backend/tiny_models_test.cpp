// Architecture paths SmolLM2 does not take (Qwen2's q/k/v bias with an untied lm_head; llama3
// rope scaling), checked at every position against Hugging Face transformers running the same
// tiny random-weight models (tests/data/golden/tiny_models.json, from
// tests/scripts/make_tiny_model_fixtures.py).
#include <algorithm>
#include <cmath>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_model_runner.h"
#include "model/model_config.h"

namespace optimate::cpu {
namespace {

// fp32 on both sides with identical weights; logits here are O(10), and two layers of
// different summation order move them by ~1e-6 relative. A wrong bias, rotary frequency or
// head mapping moves them by whole units.
constexpr float kAtol = 1e-4f;
constexpr float kRtol = 1e-4f;

const nlohmann::json& fixture() {
  static const nlohmann::json j = [] {
    std::ifstream f(std::string(OPTIMATE_TEST_DATA_DIR) + "/golden/tiny_models.json");
    return nlohmann::json::parse(f);
  }();
  return j;
}

ModelWeights weights_from(const nlohmann::json& entry, const ModelConfig& config) {
  const auto& w = entry["weights"];
  auto t = [&](const std::string& name) {
    const auto& e = w.at(name);
    return make_f32_tensor(name, e["shape"].get<std::vector<int64_t>>(), e["values"].get<std::vector<float>>());
  };
  ModelWeights out;
  out.tok_embeddings = t("model.embed_tokens.weight");
  out.final_norm = t("model.norm.weight");
  out.lm_head = config.tie_word_embeddings ? out.tok_embeddings : t("lm_head.weight");
  for (int64_t i = 0; i < config.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights l;
    l.attn_norm = t(p + "input_layernorm.weight");
    l.wq = t(p + "self_attn.q_proj.weight");
    l.wk = t(p + "self_attn.k_proj.weight");
    l.wv = t(p + "self_attn.v_proj.weight");
    l.wo = t(p + "self_attn.o_proj.weight");
    if (w.contains(p + "self_attn.q_proj.bias")) {
      l.bq = t(p + "self_attn.q_proj.bias");
      l.bk = t(p + "self_attn.k_proj.bias");
      l.bv = t(p + "self_attn.v_proj.bias");
    }
    l.ffn_norm = t(p + "post_attention_layernorm.weight");
    l.w_gate = t(p + "mlp.gate_proj.weight");
    l.w_up = t(p + "mlp.up_proj.weight");
    l.w_down = t(p + "mlp.down_proj.weight");
    out.layers.push_back(std::move(l));
  }
  return out;
}

void expect_row(const std::vector<float>& got, const nlohmann::json& want_row, const std::string& where) {
  const auto want = want_row.get<std::vector<float>>();
  ASSERT_EQ(got.size(), want.size()) << where;
  int mismatches = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::fabs(got[i] - want[i]) > kAtol + kRtol * std::fabs(want[i]) && mismatches++ < 5)
      ADD_FAILURE() << where << ": logit " << i << " is " << got[i] << ", transformers " << want[i];
}

class TinyModels : public ::testing::TestWithParam<const char*> {};

TEST_P(TinyModels, EveryPositionMatchesTransformers) {
  const auto& entry = fixture().at(GetParam());
  const ModelConfig config = model_config_from_hf_json(entry["config"], GetParam());
  const ModelWeights weights = weights_from(entry, config);
  const auto prompt = entry["prompt_ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> blocks(16);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<int32_t>(15 - i);

  CpuModelRunner runner(config, weights, {.num_kv_blocks = 16, .block_size = 4, .num_threads = 1});
  std::vector<float> logits;
  for (size_t p = 0; p < prompt.size(); ++p) {
    runner.forward({.seqs = {{.token_ids = std::span(prompt).subspan(p, 1),
                              .start_pos = static_cast<int64_t>(p),
                              .block_table = blocks}}},
                   logits);
    expect_row(logits, entry["logits"][p], std::string(GetParam()) + " position " + std::to_string(p));
  }
  runner.forward({.seqs = {{.token_ids = prompt, .block_table = blocks}}}, logits);
  expect_row(logits, entry["logits"][prompt.size() - 1], std::string(GetParam()) + " whole prompt");
}

INSTANTIATE_TEST_SUITE_P(Architectures, TinyModels, ::testing::Values("qwen2_bias", "llama3_rope"));

}  // namespace
}  // namespace optimate::cpu
