// Tensor parallelism on the CUDA backend on one GPU, against the one-GPU runner on the same
// weights: TP=2 with both ranks on GPU 0 over the host-staged communicator (eager steps), and
// TP=1 through NCCL (its collectives captured in the decode graphs). A split computes what one
// runner does up to rounding: each rank's part of the o and down projections is summed in fp32
// before the bf16 rounding one GPU applies to the whole product, so a bf16 element may land one
// unit away and the difference grows through the layers.
//   small random configs (2 layers): every logit within 3e-2 + 3e-2 * |logit| (the bound the
//     runner's own test holds it to against its fp32 twin), the same top-1 wherever the one-GPU
//     runner's top two logits are 0.05 apart or more;
//   SmolLM2-135M (30 layers, TP=3 since 9 heads do not split in 2, and TP=1 over NCCL): the same
//     16 greedy tokens on every golden prompt (each step fed the one-GPU runner's token; a
//     different token passes only where the one-GPU runner's top two logits are closer than
//     twice the runners' largest logit difference, and is printed); the largest logit
//     difference 0 over NCCL at TP=1, at most 1.0 at TP=3 (0.64 measured on an H200).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_model_runner.h"
#include "backend/cuda/cuda_tp_runner.h"
#include "core/error.h"
#include "model/weights.h"
#include "small_models.h"
#include "test_util.h"

namespace optimate::cuda {
namespace {

using namespace testing;

CudaTpOptions one_gpu(int ranks) {
  return {.num_ranks = ranks, .ranks_share_device = true, .communicator = TpCommunicatorKind::kHostStaged};
}

CudaTpOptions over_nccl(int ranks) {
  return {.num_ranks = ranks, .ranks_share_device = false, .communicator = TpCommunicatorKind::kNccl};
}

float top_margin(const std::vector<float>& r) {
  std::vector<float> s = r;
  std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<>());
  return s[0] - s[1];
}

// Three sequences prefilled in one step (the unfused path), decoded together for three steps
// (three rows: cuBLASLt), then the first alone through forward_sample's greedy draw (one row:
// the fused GEMVs, and graphs where the runner replays them). Both runners get the one-GPU
// runner's tokens, so every step compares like with like.
void expect_same_steps(ModelRunner& one, ModelRunner& split, const ModelConfig& c, const std::string& what) {
  const int64_t V = c.vocab_size;
  std::vector<std::vector<int32_t>> seqs = {random_tokens(45, V, 5), random_tokens(20, V, 6), random_tokens(33, V, 7)};
  const std::vector<std::vector<int32_t>> tables = {scattered_table(8, 3), scattered_table(8, 90), scattered_table(8, 140)};
  auto check = [&](const std::vector<float>& want, const std::vector<float>& got, const std::string& step) {
    ASSERT_EQ(got.size(), want.size()) << what << " " << step;
    expect_close(got, want, 3e-2f, 3e-2f, what + " " + step);
    for (size_t r = 0; r < want.size() / V; ++r) {
      const std::vector<float> w = row(want, static_cast<int64_t>(r), V), g = row(got, static_cast<int64_t>(r), V);
      if (top_margin(w) >= 0.05f) EXPECT_EQ(argmax(g), argmax(w)) << what << " " << step << " row " << r;
    }
  };
  std::vector<float> want, got;
  ForwardBatch prefill;
  for (size_t i = 0; i < seqs.size(); ++i) prefill.seqs.push_back(SeqSlice{seqs[i], 0, tables[i], true});
  one.forward(prefill, want);
  split.forward(prefill, got);
  check(want, got, "prefill");
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<int32_t>> next(seqs.size());
    ForwardBatch decode;
    for (size_t i = 0; i < seqs.size(); ++i) {
      next[i] = {argmax(row(want, static_cast<int64_t>(i), V))};
      decode.seqs.push_back(SeqSlice{next[i], static_cast<int64_t>(seqs[i].size()), tables[i], true});
    }
    one.forward(decode, want);
    split.forward(decode, got);
    check(want, got, "decode step " + std::to_string(step));
    for (size_t i = 0; i < seqs.size(); ++i) seqs[i].push_back(next[i][0]);
  }
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  const std::vector<SampleSpec> spec = {SampleSpec{.params = &greedy}};
  std::vector<int32_t> drawn;
  std::vector<float> last = row(want, 0, V);
  for (int step = 0; step < 4; ++step) {
    const std::vector<int32_t> next = {argmax(last)};
    const ForwardBatch decode{{SeqSlice{next, static_cast<int64_t>(seqs[0].size()), tables[0], true}}};
    one.forward(decode, want);
    ASSERT_TRUE(split.forward_sample(decode, spec, drawn)) << what;
    ASSERT_EQ(drawn.size(), 1u);
    if (top_margin(want) >= 0.05f) EXPECT_EQ(drawn[0], argmax(want)) << what << " sampled step " << step;
    seqs[0].push_back(next[0]);
    last = want;
  }
}

struct SplitCase {
  const char* name;
  bool gqa_llama3;
  int64_t vocab;  // 1001: the last rank's vocabulary slice is one row short
  bool nccl;      // TP=1 over NCCL; else TP=2 on one GPU, host-staged
};

class CudaTpVsOneGpu : public ::testing::TestWithParam<SplitCase> {};

TEST_P(CudaTpVsOneGpu, SameLogitsAndTokens) {
  OPTIMATE_REQUIRE_GPU();
  const SplitCase& p = GetParam();
  ModelConfig c = small_config(p.gqa_llama3);
  c.vocab_size = p.vocab;
  const LoadedModel host = make_dummy_model(c, 4321);
  CudaModelRunner one(host, small_options());
  auto split = make_cuda_tp_runner(c, &host.weights, 0, small_options(), p.nccl ? over_nccl(1) : one_gpu(2));
  ASSERT_EQ(split->num_ranks(), p.nccl ? 1 : 2);
  EXPECT_EQ(split->kv_shape().num_kv_heads, c.num_kv_heads);
  EXPECT_EQ(split->kv_shape().num_blocks, one.kv_shape().num_blocks);
  expect_same_steps(one, *split, c, p.name);
}

INSTANTIATE_TEST_SUITE_P(
    Splits, CudaTpVsOneGpu,
    ::testing::Values(SplitCase{"Llama3GqaTwoRanks", true, 1000, false},
                      SplitCase{"Llama3GqaTwoRanksUnevenVocab", true, 1001, false},
                      SplitCase{"BiasTiedD128TwoRanks", false, 1000, false},
                      SplitCase{"Llama3GqaOneRankNccl", true, 1001, true},
                      SplitCase{"BiasTiedD128OneRankNccl", false, 1000, true}),
    [](const auto& info) { return std::string(info.param.name); });

// SmolLM2 on the golden prompts: greedy continuations from the split runner and from one runner.
class CudaTpSmolLM2 : public ::testing::TestWithParam<bool> {};

TEST_P(CudaTpSmolLM2, SameGreedyTokensAsOneGpu) {
  OPTIMATE_REQUIRE_GPU();
  const std::string path = std::string(OPTIMATE_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const bool nccl = GetParam();
  std::ifstream f(std::string(OPTIMATE_TEST_DATA_DIR) + "/golden/smollm2_golden.json");
  const nlohmann::json fixture = nlohmann::json::parse(f);
  const LoadedModel model = load_model(path);
  CudaRunnerOptions o;
  o.max_num_batched_tokens = 256;
  o.max_num_seqs = 4;
  o.max_model_len = 256;
  o.num_kv_blocks = 16;
  CudaModelRunner one(model, o);
  auto split = make_cuda_tp_runner(model.config, &model.weights, 0, o, nccl ? over_nccl(1) : one_gpu(3));
  const int64_t V = model.config.vocab_size;
  const std::vector<int32_t> table = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  float worst = 0.0f;
  int ties = 0, tokens = 0;
  for (const auto& ca : fixture["cases"]) {
    const std::string name = ca["name"];
    const auto prompt = ca["prompt_ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> mine = prompt, theirs = prompt;
    std::vector<float> a, b;
    one.forward({{SeqSlice{prompt, 0, table, true}}}, a);
    split->forward({{SeqSlice{prompt, 0, table, true}}}, b);
    for (int step = 0; step < 16; ++step) {
      ASSERT_EQ(a.size(), b.size());
      float diff = 0.0f;
      for (int64_t v = 0; v < V; ++v) diff = std::max(diff, std::fabs(a[v] - b[v]));
      worst = std::max(worst, diff);
      theirs.push_back(argmax(a));
      mine.push_back(argmax(b));
      ++tokens;
      // A different token is a failure unless the one-GPU runner's top two were closer than the
      // runners' logits differ (a tie within rounding, which either could break).
      if (mine.back() != theirs.back()) {
        std::printf("CUDA TP SmolLM2: %s step %d: token %d against %d, top-2 margin %.4f, max logit diff %.4f\n",
                    name.c_str(), step, mine.back(), theirs.back(), top_margin(a), diff);
        EXPECT_LT(top_margin(a), 2.0f * diff) << name << ": the split runner's greedy token differs at step " << step;
        ++ties;
      }
      const std::vector<int32_t> next = {theirs.back()};
      const int64_t pos = static_cast<int64_t>(theirs.size()) - 1;
      one.forward({{SeqSlice{next, pos, table, true}}}, a);
      split->forward({{SeqSlice{next, pos, table, true}}}, b);
    }
  }
  std::printf("CUDA TP SmolLM2 (%s): max |logit diff| against one GPU %.4f; %d of %d greedy tokens differ "
              "at a tie\n", nccl ? "TP=1 over NCCL" : "TP=3 on one GPU", worst, ties, tokens);
  // Over NCCL at TP=1 nothing is split and the logits must be the one runner's. Split three ways,
  // each rank's o and down projections sum in fp32 in another order before the one bf16 rounding,
  // which moves a rounding now and then; over 30 layers that reached 0.64 (of logits spanning
  // about 40) on an H200 without changing one greedy token, so the bound is on that scale.
  EXPECT_LE(worst, nccl ? 1e-6f : 1.0f);
}

INSTANTIATE_TEST_SUITE_P(Communicators, CudaTpSmolLM2, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "OneRankNccl" : "ThreeRanksOneGpu"; });

TEST(CudaTp, RefusesSplitsThatCannotRun) {
  OPTIMATE_REQUIRE_GPU();
  const ModelConfig c = small_config(true);  // 8 heads, 2 KV heads
  const LoadedModel host = make_dummy_model(c, 1);
  EXPECT_THROW(make_cuda_tp_runner(c, &host.weights, 0, small_options(), one_gpu(3)), Error);  // heads
  EXPECT_THROW(make_cuda_tp_runner(c, &host.weights, 0, small_options(), one_gpu(4)), Error);  // KV heads
  EXPECT_THROW(make_cuda_tp_runner(c, &host.weights, 0, small_options(), over_nccl(cuda_device_count() + 1)), Error);
}

}  // namespace
}  // namespace optimate::cuda
