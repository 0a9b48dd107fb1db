// Loading GGUF models: Q/K weights come back in Hugging Face's layout, as transformers reads
// the same files (tests/data/model/tiny_llama_gguf.json, smollm2_reference.json).
#include <filesystem>

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/gguf_file.h"
#include "model/weights.h"
#include "weights_test_util.h"

namespace optimate {
namespace {

// GGUF names -> the names transformers gives the same tensors.
std::string hf_name(const std::string& gguf_name) {
  static const std::vector<std::pair<std::string, std::string>> kParts = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"}, {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"}, {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"}, {"ffn_down.weight", "mlp.down_proj.weight"}};
  const auto dot = gguf_name.find('.', 4);
  const std::string layer = gguf_name.substr(4, dot - 4), rest = gguf_name.substr(dot + 1);
  for (const auto& [g, h] : kParts) {
    if (rest == g) return "model.layers." + layer + "." + h;
  }
  return "";
}

TEST(GgufWeights, TinyLlamaMatchesTransformersLayout) {
  const LoadedModel m = load_model(testing::model_fixture("tiny_llama.gguf"));
  ASSERT_TRUE(m.gguf);
  EXPECT_FALSE(m.config.tie_word_embeddings);
  const auto ref = testing::read_json_file(testing::model_fixture("tiny_llama_gguf.json"));
  const auto& l0 = m.weights.layers[0];
  EXPECT_EQ(l0.wq.dtype, DType::kQ8_0);  // un-permuted without dequantizing
  testing::expect_rows(l0.wq, ref.at("q_proj_rows"), "layer 0 q_proj");
  testing::expect_rows(m.weights.layers[1].wk, ref.at("k_proj_rows"), "layer 1 k_proj");

  const auto tensors = testing::by_file_name(m.weights);
  size_t checked = 0;
  for (const auto& [gguf_name, t] : tensors) {
    const std::string name = hf_name(gguf_name);
    if (!ref.at("tensors").contains(name)) continue;
    testing::expect_matches_summary(*t, ref.at("tensors").at(name), gguf_name);
    ++checked;
  }
  EXPECT_EQ(checked, ref.at("tensors").size());
}

TEST(GgufWeights, DirectoryWithOneGgufLoadsIt) {
  const auto dir = std::filesystem::temp_directory_path() / "optimate_gguf_dir_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy(testing::model_fixture("tiny_llama.gguf"), dir / "m.gguf");
  EXPECT_EQ(load_model(dir.string()).config.num_layers, 2);
  std::filesystem::remove_all(dir);
}

class SmolLM2 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(testing::smollm2_path())) {
      GTEST_SKIP() << testing::smollm2_path() << " is absent (scripts/setup.sh fetches it)";
    }
  }
};

TEST_F(SmolLM2, ConfigMatchesTransformers) {
  const LoadedModel m = load_model(testing::smollm2_path());
  const auto ref = testing::read_json_file(testing::model_fixture("smollm2_reference.json"));
  const auto& rc = ref.at("config");
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.architecture, Architecture::kLlama);
  EXPECT_EQ(c.vocab_size, rc.at("vocab_size").get<int64_t>());
  EXPECT_EQ(c.hidden_size, rc.at("hidden_size").get<int64_t>());
  EXPECT_EQ(c.intermediate_size, rc.at("intermediate_size").get<int64_t>());
  EXPECT_EQ(c.num_layers, rc.at("num_hidden_layers").get<int64_t>());
  EXPECT_EQ(c.num_heads, rc.at("num_attention_heads").get<int64_t>());
  EXPECT_EQ(c.num_kv_heads, rc.at("num_key_value_heads").get<int64_t>());
  EXPECT_EQ(c.head_dim, rc.at("head_dim").get<int64_t>());
  EXPECT_EQ(c.max_position_embeddings, rc.at("max_position_embeddings").get<int64_t>());
  EXPECT_FLOAT_EQ(c.rms_norm_eps, rc.at("rms_norm_eps").get<float>());
  EXPECT_FLOAT_EQ(c.rope_theta, rc.at("rope_theta").get<float>());
  EXPECT_EQ(c.tie_word_embeddings, rc.at("tie_word_embeddings").get<bool>());
  EXPECT_EQ(c.bos_token_id, rc.at("bos_token_id").get<int64_t>());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{rc.at("eos_token_id").get<int64_t>()}));
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kNone);
}

TEST_F(SmolLM2, TensorsAndShapes) {
  const LoadedModel m = load_model(testing::smollm2_path());
  EXPECT_EQ(m.gguf->tensor_infos().size(), 272u);
  EXPECT_EQ(m.weights.layers.size(), 30u);
  EXPECT_EQ(m.weights.tok_embeddings.shape, (std::vector<int64_t>{49152, 576}));
  EXPECT_EQ(m.weights.tok_embeddings.dtype, DType::kQ8_0);
  EXPECT_EQ(m.weights.lm_head.data.data(), m.weights.tok_embeddings.data.data());
  const auto& l = m.weights.layers[29];
  EXPECT_EQ(l.wq.shape, (std::vector<int64_t>{576, 576}));
  EXPECT_EQ(l.wk.shape, (std::vector<int64_t>{192, 576}));
  EXPECT_EQ(l.wv.shape, (std::vector<int64_t>{192, 576}));
  EXPECT_EQ(l.wo.shape, (std::vector<int64_t>{576, 576}));
  EXPECT_EQ(l.w_gate.shape, (std::vector<int64_t>{1536, 576}));
  EXPECT_EQ(l.w_down.shape, (std::vector<int64_t>{576, 1536}));
  EXPECT_EQ(l.attn_norm.shape, (std::vector<int64_t>{576}));
  EXPECT_EQ(l.wq.dtype, DType::kQ4_1);
  EXPECT_FALSE(l.bq.has_value());
}

TEST_F(SmolLM2, WeightsMatchTransformers) {
  const LoadedModel m = load_model(testing::smollm2_path());
  const auto ref = testing::read_json_file(testing::model_fixture("smollm2_reference.json"));
  const auto& l0 = m.weights.layers[0];
  testing::expect_rows(l0.wq, ref.at("q_proj_rows"), "q_proj");
  testing::expect_rows(l0.wk, ref.at("k_proj_rows"), "k_proj");
  testing::expect_rows(l0.wv, ref.at("v_proj_rows"), "v_proj");
  testing::expect_rows(m.weights.tok_embeddings, ref.at("embed_rows"), "embed_tokens");
  const auto norm = to_f32(m.weights.final_norm);
  const auto expected = ref.at("final_norm").get<std::vector<float>>();
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(norm[i], expected[i]) << i;
}

}  // namespace
}  // namespace optimate
