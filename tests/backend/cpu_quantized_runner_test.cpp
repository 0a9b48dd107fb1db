// The CPU runner holding weights as stored against the same runner widening everything to fp32,
// on a tiny model whose matrices mix block types: q/k/v of different types (stacked as fp32),
// gate/up both Q4_1 (stacked as blocks), an untied Q8_0 LM head, a Q8_0 embedding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_model_runner.h"
#include "random_blocks.h"
#include "tiny_model.h"

namespace optimate::cpu {
namespace {

TEST(CpuQuantizedWeights, GiveTheLogitsOfTheFp32Path) {
  const ModelConfig c = testing::tiny_config(/*attention_bias=*/true);  // untied LM head
  ASSERT_FALSE(c.tie_word_embeddings);
  ModelWeights w = testing::tiny_weights(c, 3);
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  uint32_t seed = 100;
  // Scales 2^-12 .. 2^-7: weights below ~1 in magnitude.
  auto blocks = [&](DType t, std::vector<int64_t> shape) {
    return testing::random_block_tensor("w" + std::to_string(seed), t, std::move(shape), seed++, 3, 8);
  };
  w.tok_embeddings = blocks(DType::kQ8_0, {c.vocab_size, h});
  w.lm_head = blocks(DType::kQ8_0, {c.vocab_size, h});
  for (LayerWeights& l : w.layers) {
    l.wq = blocks(DType::kQ8_0, {q, h});
    l.wk = blocks(DType::kQ4_1, {kv, h});
    l.wv = blocks(DType::kQ8_0, {kv, h});
    l.wo = blocks(DType::kQ4_1, {h, q});
    l.w_gate = blocks(DType::kQ4_1, {c.intermediate_size, h});
    l.w_up = blocks(DType::kQ4_1, {c.intermediate_size, h});
    l.w_down = blocks(DType::kQ8_0, {h, c.intermediate_size});
  }
  CpuRunnerOptions o{.num_kv_blocks = 16, .block_size = 16, .num_threads = 2, .activations = CpuActivations::kF32};
  CpuModelRunner stored(c, w, o);
  o.keep_quantized = false;
  CpuModelRunner fp32(c, w, o);
  // Q8_0 is 34 bytes per 32 weights, Q4_1 20: far below fp32 even with q/k/v widened.
  EXPECT_LT(stored.weight_bytes() * 2, fp32.weight_bytes());

  std::vector<int32_t> prompt(20), table(8);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 5) % c.vocab_size);
  std::iota(table.begin(), table.end(), 0);
  auto compare = [&](std::span<const int32_t> tokens, int64_t start, const char* what) {
    std::vector<float> a, b;
    const ForwardBatch batch{{SeqSlice{tokens, start, table, true}}};
    stored.forward(batch, a);
    fp32.forward(batch, b);
    ASSERT_EQ(a.size(), b.size());
    float scale = 0.0f, diff = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) {
      scale = std::max(scale, std::fabs(b[i]));
      diff = std::max(diff, std::fabs(a[i] - b[i]));
    }
    EXPECT_GT(scale, 0.1f) << what;
    EXPECT_LE(diff, 1e-4f * (1.0f + scale)) << what;
    const auto top = [](const std::vector<float>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); };
    EXPECT_EQ(top(a), top(b)) << what;
  };
  compare(prompt, 0, "prefill of 20 tokens (sgemm on dequantized rows)");
  for (int32_t step = 0; step < 3; ++step) {
    const int32_t token = 7 + step;
    compare(std::span<const int32_t>(&token, 1), 20 + step, "decode (quantized kernels)");
  }
}

}  // namespace
}  // namespace optimate::cpu
