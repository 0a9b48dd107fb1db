// ModelConfig from config.json and GGUF metadata, and rotary frequencies against transformers.
#include <cmath>

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/gguf_file.h"
#include "model/model_config.h"
#include "gguf_builder.h"
#include "model_test_util.h"

namespace optimate {
namespace {

using nlohmann::json;

ModelConfig hf_fixture(const std::string& dir) {
  const std::string path = testing::model_fixture(dir + "/config.json");
  return model_config_from_hf_json(testing::read_json_file(path), path);
}

// Llama-3.2-1B's config.json as transformers 4.x wrote it.
json llama32_config() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009], "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "intermediate_size": 8192, "max_position_embeddings": 131072,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "vocab_size": 128256})");
}

std::string error_of(const json& j) {
  try {
    model_config_from_hf_json(j, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfigHf, ReadsTransformers5Configs) {
  const ModelConfig tied = hf_fixture("tiny_llama");
  EXPECT_EQ(tied.architecture, Architecture::kLlama);
  EXPECT_EQ(tied.vocab_size, 256);
  EXPECT_EQ(tied.hidden_size, 64);
  EXPECT_EQ(tied.intermediate_size, 128);
  EXPECT_EQ(tied.num_layers, 2);
  EXPECT_EQ(tied.num_heads, 4);
  EXPECT_EQ(tied.num_kv_heads, 2);
  EXPECT_EQ(tied.head_dim, 16);
  EXPECT_FLOAT_EQ(tied.rope_theta, 50000.0f);
  EXPECT_FLOAT_EQ(tied.rms_norm_eps, 1e-6f);
  EXPECT_TRUE(tied.tie_word_embeddings);
  EXPECT_FALSE(tied.attention_bias);
  EXPECT_EQ(tied.bos_token_id, 1);
  EXPECT_EQ(tied.eos_token_ids, (std::vector<int64_t>{2}));

  const ModelConfig scaled = hf_fixture("tiny_llama_sharded");
  EXPECT_FALSE(scaled.tie_word_embeddings);
  EXPECT_EQ(scaled.rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_FLOAT_EQ(scaled.rope_scaling.factor, 8.0f);
  EXPECT_EQ(scaled.rope_scaling.original_max_position_embeddings, 128);

  const ModelConfig qwen = hf_fixture("tiny_qwen2");
  EXPECT_EQ(qwen.architecture, Architecture::kQwen2);
  EXPECT_TRUE(qwen.attention_bias);
  EXPECT_EQ(qwen.max_position_embeddings, 512);
}

// The names the server reports (/get_model_info) are the ones transformers writes, for every
// architecture it has a fixture of.
TEST(ModelConfigHf, HuggingFaceNamesAreTheOnesTransformersWrites) {
  for (const char* dir : {"tiny_llama", "tiny_mixtral", "tiny_qwen2", "tiny_qwen3", "tiny_qwen3_moe"}) {
    const json file = testing::read_json_file(testing::model_fixture(std::string(dir) + "/config.json"));
    const HfArchitectureName name = hf_architecture_name(hf_fixture(dir).architecture);
    EXPECT_EQ(name.class_name, file["architectures"][0].get<std::string>()) << dir;
    EXPECT_EQ(name.model_type, file["model_type"].get<std::string>()) << dir;
  }
}

TEST(ModelConfigHf, ReadsTransformers4RopeScaling) {
  const ModelConfig c = model_config_from_hf_json(llama32_config(), "config.json");
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 32.0f);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_TRUE(c.tie_word_embeddings);

  json linear = llama32_config();
  linear["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(model_config_from_hf_json(linear, "c").rope_scaling.type, RopeScalingType::kLinear);
}

TEST(ModelConfigHf, MistralContextIsLimitedToItsWindow) {
  json j = llama32_config();
  j.erase("rope_scaling");
  j["architectures"] = {"MistralForCausalLM"};
  j["max_position_embeddings"] = 32768;
  j["sliding_window"] = 4096;
  const ModelConfig c = model_config_from_hf_json(j, "config.json");
  EXPECT_EQ(c.architecture, Architecture::kMistral);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  j["sliding_window"] = nullptr;
  EXPECT_EQ(model_config_from_hf_json(j, "config.json").max_position_embeddings, 32768);
}

TEST(ModelConfigHf, ErrorsNameTheProblem) {
  json j = llama32_config();
  j["architectures"] = {"GPT2LMHeadModel"};
  EXPECT_NE(error_of(j).find("GPT2LMHeadModel"), std::string::npos);
  j = llama32_config();
  j.erase("hidden_size");
  EXPECT_NE(error_of(j).find("'hidden_size'"), std::string::npos);
  j = llama32_config();
  j["num_key_value_heads"] = 5;
  EXPECT_NE(error_of(j).find("num_key_value_heads"), std::string::npos);
  j = llama32_config();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_NE(error_of(j).find("yarn"), std::string::npos);
  j = llama32_config();
  j["vocab_size"] = "many";
  EXPECT_NE(error_of(j).find("vocab_size"), std::string::npos);
  j = llama32_config();
  j["eos_token_id"] = 200000;
  EXPECT_NE(error_of(j).find("eos_token_id"), std::string::npos);
  EXPECT_NE(error_of(json::array()), "");
}

// rope.json holds transformers' own inverse frequencies for each rope type.
TEST(RopeInvFreq, MatchesTransformers) {
  const auto fixtures = testing::read_json_file(testing::model_fixture("rope.json"));
  for (const auto& [name, fx] : fixtures.items()) {
    json cfg = fx.at("config");
    cfg["architectures"] = {"LlamaForCausalLM"};
    const ModelConfig c = model_config_from_hf_json(cfg, "rope.json:" + name);
    const auto expected = fx.at("inv_freq").get<std::vector<float>>();
    const auto got = rope_inv_freq(c);
    ASSERT_EQ(got.size(), expected.size()) << name;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], expected[i], 2e-7 * expected[i]) << name << " index " << i;
    }
  }
}

std::vector<uint8_t> gguf_config(const std::string& arch, bool with_eps = true) {
  testing::GgufBuilder b;
  testing::add_decoder_keys(b, arch, 4, with_eps);
  b.add_f32(arch + ".rope.freq_base", 1e6f);
  b.add_strings("tokenizer.ggml.tokens", std::vector<std::string>(300, "t"));
  b.add_u32("tokenizer.ggml.bos_token_id", 11);
  b.add_u32("tokenizer.ggml.eos_token_id", 12);
  b.add_u32("tokenizer.ggml.eot_token_id", 13);
  return b.build();
}

TEST(ModelConfigGguf, ReadsArchitectureKeys) {
  const auto bytes = gguf_config("qwen2");
  const ModelConfig c = model_config_from_gguf(*GgufFile::parse(bytes, "q.gguf"));
  EXPECT_EQ(c.architecture, Architecture::kQwen2);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.num_layers, 4);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.vocab_size, 300);  // from the token list: no token_embd here
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 11);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{12, 13}));
}

TEST(ModelConfigGguf, ErrorsNameTheKey) {
  auto error = [](const std::vector<uint8_t>& bytes) -> std::string {
    try {
      model_config_from_gguf(*GgufFile::parse(bytes, "m.gguf"));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error(gguf_config("gpt2")).find("'gpt2'"), std::string::npos);
  EXPECT_NE(error(gguf_config("llama", false)).find("llama.attention.layer_norm_rms_epsilon"),
            std::string::npos);
  EXPECT_NE(error(gguf_config("llama", false)).find("m.gguf"), std::string::npos);
}

TEST(ModelConfigGguf, MatchesTheHfConfigOfTheSameModel) {
  const auto gguf = GgufFile::open(testing::model_fixture("tiny_llama.gguf"));
  const ModelConfig g = model_config_from_gguf(*gguf);
  const ModelConfig h = hf_fixture("tiny_llama_sharded");
  EXPECT_EQ(g.vocab_size, h.vocab_size);
  EXPECT_EQ(g.hidden_size, h.hidden_size);
  EXPECT_EQ(g.intermediate_size, h.intermediate_size);
  EXPECT_EQ(g.num_layers, h.num_layers);
  EXPECT_EQ(g.num_heads, h.num_heads);
  EXPECT_EQ(g.num_kv_heads, h.num_kv_heads);
  EXPECT_EQ(g.head_dim, h.head_dim);
  EXPECT_EQ(g.max_position_embeddings, h.max_position_embeddings);
  EXPECT_FLOAT_EQ(g.rms_norm_eps, h.rms_norm_eps);
  EXPECT_EQ(g.tie_word_embeddings, h.tie_word_embeddings);
  EXPECT_EQ(g.bos_token_id, h.bos_token_id);
  EXPECT_EQ(g.eos_token_ids, h.eos_token_ids);
}

}  // namespace
}  // namespace optimate
