// SmolLM2-135M-Instruct (Q4_1 GGUF; 9 heads, 3 KV heads: it splits over 3 ranks) on the CPU
// runner split over 3 in-process ranks, against Hugging Face transformers on the same file
// (tests/data/golden/smollm2_golden.json): the fp32-activation path to the golden test's bound
// (golden_smollm2_test.cpp: 1e-3 on the top-20 logits, identical greedy continuations). The
// split changes only the order of the o and down projections' sums (and the all-reduce adds
// them in rank order), fp32 rounding far inside that bound.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_tp_runner.h"
#include "model/weights.h"

namespace optimate::cpu {
namespace {

constexpr float kLogitTolerance = 1e-3f;
constexpr size_t kGreedyTokens = 16;  // of the fixture's 64: the split is in every step alike
const std::string kModel = std::string(OPTIMATE_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";

int32_t argmax(std::span<const float> v) { return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin()); }

TEST(TensorParallelSmolLM2, ThreeRanksMatchTransformers) {
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << kModel << " not present";
  std::ifstream f(std::string(OPTIMATE_TEST_DATA_DIR) + "/golden/smollm2_golden.json");
  const nlohmann::json fixture = nlohmann::json::parse(f);
  const LoadedModel model = load_model(kModel);
  auto runner = make_cpu_tp_runner(
      model.config, model.weights,
      CpuRunnerOptions{.num_kv_blocks = 16, .block_size = 16, .num_threads = 3, .activations = CpuActivations::kF32}, 3);
  const std::vector<int32_t> blocks = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const int64_t vocab = model.config.vocab_size;
  float worst = 0.0f;
  for (const auto& c : fixture["cases"]) {
    auto tokens = c["prompt_ids"].get<std::vector<int32_t>>();
    const std::string name = c["name"];
    // Every prompt position's logits in one step.
    std::vector<float> logits;
    runner->forward({{SeqSlice{tokens, 0, blocks, true, /*all_logits=*/true}}}, logits);
    ASSERT_EQ(logits.size(), tokens.size() * vocab);
    for (size_t p = 0; p < tokens.size(); ++p) {
      const std::span<const float> row(logits.data() + p * vocab, static_cast<size_t>(vocab));
      const auto& want = c["positions"][p];
      const auto ids = want["top_ids"].get<std::vector<int32_t>>();
      const auto values = want["top_logits"].get<std::vector<float>>();
      EXPECT_EQ(argmax(row), ids[0]) << name << " position " << p;
      for (size_t i = 0; i < ids.size(); ++i) {
        worst = std::max(worst, std::fabs(row[ids[i]] - values[i]));
        EXPECT_NEAR(row[ids[i]], values[i], kLogitTolerance) << name << " position " << p << " token " << ids[i];
      }
    }
    // Greedy decoding, one token a step: the reference's first kGreedyTokens.
    auto want = c["greedy_ids"].get<std::vector<int32_t>>();
    want.resize(std::min(want.size(), kGreedyTokens));
    std::vector<int32_t> got;
    int32_t next = argmax(std::span<const float>(logits).last(static_cast<size_t>(vocab)));
    for (size_t i = 0; i < want.size(); ++i) {
      got.push_back(next);
      tokens.push_back(next);
      runner->forward({{SeqSlice{std::span(tokens).last(1), static_cast<int64_t>(tokens.size() - 1), blocks, true}}},
                      logits);
      next = argmax(logits);
    }
    EXPECT_EQ(got, want) << name;
  }
  std::printf("3 ranks: max |logit - transformers| = %g\n", worst);
}

}  // namespace
}  // namespace optimate::cpu
