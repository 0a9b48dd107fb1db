// The CPU runner split by tensor parallelism over 2 and 4 in-process ranks against the same
// model on one runner: the same greedy tokens, and logits within a bound that only the order of
// the sums the split moves can explain.
//
// Bound. A split changes which partial sums the o and down projections form (one dot product
// of q_dim or intermediate terms becomes N of them added in rank order) and nothing else on the
// fp32 path, so each layer's output moves by a few fp32 ulps relative to the row's magnitude:
// measured, at most 3.1e-5 on these logits at 2 and 4 ranks. |a - b| <= 1e-4 + 1e-4 |b| leaves
// room for other kernels and thread counts and still catches a misplaced head, a dropped rank's part
// or a vocabulary slice in the wrong place (whole units). The 8-bit path quantizes each
// product's input; an input that differs in its last bit can round to the neighbouring level
// (a step of max|x| / 127 of a group of 4), so its bound is 0.05 + 0.01 |b|, still far below
// the logits' spread.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_tp_runner.h"
#include "core/error.h"
#include "random_blocks.h"
#include "tiny_model.h"

namespace optimate::cpu {
namespace {

// The same weights as GGUF blocks (q/k/v and down Q8_0, o and gate/up Q4_1), cut by the split
// at whole blocks: per rank at 4 ranks, o and down keep 32 of 128 columns, one block.
void quantize_matrices(const ModelConfig& c, ModelWeights& w) {
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  uint32_t seed = 500;
  auto blocks = [&](DType t, std::vector<int64_t> shape) {
    return testing::random_block_tensor("q" + std::to_string(seed), t, std::move(shape), seed++, 3, 8);
  };
  for (LayerWeights& l : w.layers) {
    l.wq = blocks(DType::kQ8_0, {q, h});
    l.wk = blocks(DType::kQ8_0, {kv, h});
    l.wv = blocks(DType::kQ8_0, {kv, h});
    l.wo = blocks(DType::kQ4_1, {h, q});
    for (ExpertWeights& e : l.experts) {  // each rank's 32 or 64 of 128 columns: whole blocks
      const int64_t inter = c.moe.expert_intermediate_size;
      e = {blocks(DType::kQ4_1, {inter, h}), blocks(DType::kQ4_1, {inter, h}), blocks(DType::kQ8_0, {h, inter})};
    }
    if (c.is_moe()) continue;
    l.w_gate = blocks(DType::kQ4_1, {c.intermediate_size, h});
    l.w_up = blocks(DType::kQ4_1, {c.intermediate_size, h});
    l.w_down = blocks(DType::kQ8_0, {h, c.intermediate_size});
  }
}

struct Steps {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // per step: the rows the step asked for
};

// Two sequences at once: a prompt in two chunks (the second asking for every row's logits),
// then greedy decode steps of both together.
Steps greedy(ModelRunner& runner, int64_t vocab, int steps) {
  std::vector<int32_t> a(13), b(6), table_a(4), table_b(4);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int32_t>((i * 37 + 5) % vocab);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int32_t>((i * 11 + 90) % vocab);
  std::iota(table_a.begin(), table_a.end(), 0);
  std::iota(table_b.begin(), table_b.end(), 4);
  Steps run;
  auto argmax = [&](const std::vector<float>& l, size_t row) {
    auto first = l.begin() + static_cast<ptrdiff_t>(row * vocab);
    return static_cast<int32_t>(std::max_element(first, first + vocab) - first);
  };
  std::vector<float> logits;
  runner.forward({{SeqSlice{std::span(a).first(5), 0, table_a, false}}}, logits);
  run.logits.push_back(logits);
  runner.forward({{SeqSlice{std::span(a).subspan(5), 5, table_a, true, true},
                   SeqSlice{b, 0, table_b, true}}}, logits);
  run.logits.push_back(logits);
  const size_t rows_a = a.size() - 5;  // a's second chunk's rows come first, then b's one row
  const int32_t next_a = argmax(logits, rows_a - 1), next_b = argmax(logits, rows_a);
  a.push_back(next_a);
  b.push_back(next_b);
  for (int s = 0; s < steps; ++s) {
    const auto pos_a = static_cast<int64_t>(a.size() - 1), pos_b = static_cast<int64_t>(b.size() - 1);
    runner.forward({{SeqSlice{std::span(a).last(1), pos_a, table_a, true},
                     SeqSlice{std::span(b).last(1), pos_b, table_b, true}}}, logits);
    run.logits.push_back(logits);
    a.push_back(argmax(logits, 0));
    b.push_back(argmax(logits, 1));
  }
  run.tokens = a;
  run.tokens.insert(run.tokens.end(), b.begin(), b.end());
  return run;
}

void expect_close(const Steps& got, const Steps& want, float atol, float rtol, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  ASSERT_EQ(got.logits.size(), want.logits.size());
  float worst = 0.0f;
  int mismatches = 0;
  for (size_t s = 0; s < want.logits.size(); ++s) {
    ASSERT_EQ(got.logits[s].size(), want.logits[s].size()) << what << " step " << s;
    for (size_t i = 0; i < want.logits[s].size(); ++i) {
      const float d = std::fabs(got.logits[s][i] - want.logits[s][i]);
      worst = std::max(worst, d);
      if (d > atol + rtol * std::fabs(want.logits[s][i]) && ++mismatches <= 5)
        ADD_FAILURE() << what << " step " << s << " logit " << i << ": " << got.logits[s][i] << " vs "
                      << want.logits[s][i];
    }
  }
  std::printf("%s: max |logit - one runner's| = %g\n", what.c_str(), worst);
}

struct Case {
  const char* name;
  bool qwen2;       // attention bias, untied LM head (or, with moe, Qwen3-MoE's experts)
  bool quantized;   // GGUF blocks instead of fp32
  CpuActivations activations;
  float atol, rtol;
  bool moe = false;  // tiny_moe_config: q/k norms and 8 experts, each split over the ranks
};

class TensorParallel : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallel, TwoAndFourRanksGiveOneRunnersTokensAndLogits) {
  const Case& k = GetParam();
  const ModelConfig c = k.moe ? testing::tiny_moe_config() : testing::tiny_splittable_config(k.qwen2);
  ModelWeights w = testing::tiny_weights(c, 7);
  if (k.quantized) quantize_matrices(c, w);
  const CpuRunnerOptions o{.num_kv_blocks = 8, .block_size = 8, .num_threads = 1, .activations = k.activations};
  CpuModelRunner one(c, w, o);
  const Steps want = greedy(one, c.vocab_size, 6);
  for (int ranks : {2, 4}) {
    auto tp = make_cpu_tp_runner(c, w, o, ranks);
    EXPECT_EQ(tp->num_ranks(), ranks);
    EXPECT_EQ(tp->config().vocab_size, c.vocab_size);
    EXPECT_EQ(tp->kv_shape().num_kv_heads, c.num_kv_heads);
    EXPECT_EQ(tp->kv_shape().num_blocks, one.kv_shape().num_blocks);
    expect_close(greedy(*tp, c.vocab_size, 6), want, k.atol, k.rtol,
                 std::string(k.name) + " at " + std::to_string(ranks) + " ranks");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, TensorParallel,
    ::testing::Values(Case{"llama fp32", false, false, CpuActivations::kF32, 1e-4f, 1e-4f},
                      Case{"qwen2 fp32 (bias, untied head)", true, false, CpuActivations::kF32, 1e-4f, 1e-4f},
                      Case{"llama blocks f32 path", false, true, CpuActivations::kF32, 1e-4f, 1e-4f},
                      Case{"llama blocks q8 path", false, true, CpuActivations::kQ8, 0.05f, 0.01f},
                      Case{"qwen3 moe fp32", false, false, CpuActivations::kF32, 1e-4f, 1e-4f, true},
                      Case{"qwen3 moe blocks q8 path", false, true, CpuActivations::kQ8, 0.05f, 0.01f, true}),
    [](const auto& info) {
      std::string n = info.param.name;
      std::replace_if(n.begin(), n.end(), [](char ch) { return !std::isalnum(static_cast<unsigned char>(ch)); }, '_');
      return n;
    });

TEST(TensorParallelErrors, ASizeThatDoesNotDivideTheHeadsIsRefusedByName) {
  const ModelConfig c = testing::tiny_config();  // 4 heads, 2 KV heads
  const ModelWeights w = testing::tiny_weights(c, 1);
  const CpuRunnerOptions o{.num_kv_blocks = 4, .block_size = 8, .num_threads = 1};
  try {
    make_cpu_tp_runner(c, w, o, 4);
    FAIL() << "4 ranks accepted for 2 KV heads";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("2 KV heads"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_cpu_tp_runner(c, w, o, 0), Error);
}

// A bad batch fails on every rank: the caller gets the error, and the next step runs.
TEST(TensorParallelErrors, ABadStepIsAnErrorAndTheNextStepRuns) {
  const ModelConfig c = testing::tiny_splittable_config(false);
  const ModelWeights w = testing::tiny_weights(c, 2);
  const CpuRunnerOptions o{.num_kv_blocks = 8, .block_size = 8, .num_threads = 1, .activations = CpuActivations::kF32};
  auto tp = make_cpu_tp_runner(c, w, o, 2);
  CpuModelRunner one(c, w, o);
  const std::vector<int32_t> bad = {3, 1000}, good = {3, 4, 5}, table = {0};
  std::vector<float> logits, want;
  try {
    tp->forward({{SeqSlice{bad, 0, table, true}}}, logits);
    FAIL() << "a token outside the vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("1000"), std::string::npos) << e.what();
  }
  tp->forward({{SeqSlice{good, 0, table, true}}}, logits);
  one.forward({{SeqSlice{good, 0, table, true}}}, want);
  ASSERT_EQ(logits.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(logits[i], want[i], 1e-4f + 1e-4f * std::fabs(want[i]));
}

}  // namespace
}  // namespace optimate::cpu
