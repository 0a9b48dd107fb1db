// Loading Hugging Face directories (tiny random models saved by transformers: fp16 tied,
// bf16 sharded, fp32 Qwen2 with biases), and the errors of broken ones.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/weights.h"
#include "weights_test_util.h"

namespace optimate {
namespace {

namespace fs = std::filesystem;

void expect_matches_transformers(const std::string& dir) {
  const LoadedModel m = load_model(testing::model_fixture(dir));
  const auto expected = testing::read_json_file(testing::model_fixture(dir + "/expected.json"));
  const auto tensors = testing::by_file_name(m.weights);
  size_t checked = 0;
  for (const auto& [name, summary] : expected.at("tensors").items()) {
    const HostTensor* t = nullptr;
    if (name == "lm_head.weight") {
      t = &m.weights.lm_head;
    } else if (auto it = tensors.find(name); it != tensors.end()) {
      t = it->second;
    }
    ASSERT_NE(t, nullptr) << dir << ": " << name << " not loaded";
    testing::expect_matches_summary(*t, summary, dir + ": " + name);
    ++checked;
  }
  EXPECT_EQ(checked, expected.at("tensors").size());
}

TEST(HfWeights, TiedFp16SingleFile) {
  expect_matches_transformers("tiny_llama");
  const LoadedModel m = load_model(testing::model_fixture("tiny_llama"));
  EXPECT_EQ(m.weights.lm_head.data.data(), m.weights.tok_embeddings.data.data());
  EXPECT_EQ(m.weights.tok_embeddings.dtype, DType::kF16);
  EXPECT_FALSE(m.gguf);
  EXPECT_EQ(m.hf_dir, testing::model_fixture("tiny_llama"));
  EXPECT_EQ(m.weights.layers.size(), 2u);
}

TEST(HfWeights, UntiedBf16Sharded) {
  expect_matches_transformers("tiny_llama_sharded");
  const LoadedModel m = load_model(testing::model_fixture("tiny_llama_sharded"));
  EXPECT_NE(m.weights.lm_head.data.data(), m.weights.tok_embeddings.data.data());
  EXPECT_EQ(m.weights.layers[1].w_down.dtype, DType::kBF16);
}

TEST(HfWeights, Qwen2WithBiases) {
  expect_matches_transformers("tiny_qwen2");
  const LoadedModel m = load_model(testing::model_fixture("tiny_qwen2"));
  ASSERT_TRUE(m.weights.layers[0].bq.has_value());
  EXPECT_EQ(m.weights.layers[0].bk->shape, (std::vector<int64_t>{32}));
}

TEST(HfWeights, SafetensorsFilePathLoadsItsDirectory) {
  const LoadedModel m = load_model(testing::model_fixture("tiny_llama/model.safetensors"));
  EXPECT_EQ(m.config.vocab_size, 256);
}

class BrokenHfDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("optimate_hf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::copy(testing::model_fixture("tiny_llama_sharded"), dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  nlohmann::json read(const std::string& file) {
    return testing::read_json_file((dir_ / file).string());
  }
  void write(const std::string& file, const nlohmann::json& j) {
    std::ofstream((dir_ / file).string()) << j.dump();
  }
  std::string load_error() {
    try {
      load_model(dir_.string());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(BrokenHfDir, MissingTensorIsNamed) {
  auto index = read("model.safetensors.index.json");
  index["weight_map"].erase("model.layers.1.mlp.up_proj.weight");
  write("model.safetensors.index.json", index);
  const std::string err = load_error();
  EXPECT_NE(err.find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << err;
  EXPECT_NE(err.find("model.safetensors.index.json"), std::string::npos) << err;
}

TEST_F(BrokenHfDir, ShapeMismatchIsNamed) {
  auto config = read("config.json");
  config["intermediate_size"] = 96;
  write("config.json", config);
  const std::string err = load_error();
  EXPECT_NE(err.find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << err;
  EXPECT_NE(err.find(".safetensors'"), std::string::npos) << err;
}

TEST_F(BrokenHfDir, ShardOutsideTheDirectoryIsRefused) {
  auto index = read("model.safetensors.index.json");
  index["weight_map"]["lm_head.weight"] = "../../etc/passwd";
  write("model.safetensors.index.json", index);
  EXPECT_NE(load_error().find("not a plain file name"), std::string::npos);
}

TEST_F(BrokenHfDir, UnsupportedArchitecture) {
  auto config = read("config.json");
  config["architectures"] = {"PhiForCausalLM"};
  write("config.json", config);
  EXPECT_NE(load_error().find("PhiForCausalLM"), std::string::npos);
}

TEST_F(BrokenHfDir, MissingWeightsFile) {
  fs::remove(dir_ / "model.safetensors.index.json");
  EXPECT_NE(load_error().find("model.safetensors"), std::string::npos);
}

TEST(LoadModel, MissingPathIsNotFound) {
  try {
    load_model("/nonexistent/model.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
}

}  // namespace
}  // namespace optimate
