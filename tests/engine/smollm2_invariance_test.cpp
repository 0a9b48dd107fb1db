// Batch invariance on the real CPU backend and the embedded default model: a few requests of
// mixed lengths give the same greedy tokens one at a time and together (chunked prefill,
// prefix hits).
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/engine.h"
#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

TEST(SmolLM2, GreedyTokensIndependentOfBatch) {
  const std::string path = std::string(OPTIMATE_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not downloaded: " << path;
  EngineArgs args;
  args.model = path;
  args.max_model_len = 256;
  args.num_kv_blocks = 64;
  args.max_num_batched_tokens = 16;  // prompts of 23 and 30 tokens are prefilled in chunks
  Engine engine = create_optimized_engine(args);

  std::vector<std::vector<int32_t>> prompts = {
      {1, 9690, 198, 2683, 359, 253, 5356},
      {1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3458, 30, 42, 17, 19},
  };
  std::vector<int32_t> longer;
  for (int i = 0; i < 30; ++i) longer.push_back(100 + 37 * i);
  prompts.push_back(longer);
  prompts.push_back(std::vector<int32_t>(longer.begin(), longer.begin() + 23));
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = 6;
  greedy.ignore_eos = true;

  Results alone;
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine.add_request("r" + std::to_string(i), prompts[i], greedy);
    for (auto& [key, r] : run_to_completion(engine)) alone[key] = r;
  }
  for (size_t i = 0; i < prompts.size(); ++i)
    engine.add_request("r" + std::to_string(i), prompts[i], greedy);
  const Results together = run_to_completion(engine);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto key = std::make_pair("r" + std::to_string(i), int64_t{0});
    EXPECT_EQ(alone.at(key).tokens, together.at(key).tokens) << key.first;
    EXPECT_EQ(alone.at(key).tokens.size(), 6u);
  }
  EXPECT_EQ(engine.scheduler().kv().pool().num_free_blocks(), 64);
}

}  // namespace
}  // namespace optimate::testing
