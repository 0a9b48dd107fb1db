// Steps launched without waiting (launch_sample / collect_sample): each step's tokens come
// from the step before it on the device (token_from_last_launch), and must be the tokens the
// same runner gives one step at a time with the host feeding them back, on graph replays
// (uniform decode) and on eager steps that mix a prefill chunk with fed-back decodes.
#include <gtest/gtest.h>

#include "backend/cuda/cuda_model_runner.h"
#include "core/error.h"
#include "small_models.h"
#include "test_util.h"

namespace optimate::cuda {
namespace {

using namespace testing;

SamplingParams greedy_params() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

SamplingParams random_params() {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 40;
  return p;
}

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> table;
  int64_t computed = 0;  // positions in the cache
};

// `batch` sequences; the first `chunked` of them get their prompts in two chunks, the second
// one in the same step as the others' first decodes. Returns every sequence's tokens after
// `steps` steps, stepping one at a time (forward_sample) or overlapped.
std::vector<std::vector<int32_t>> generate(CudaModelRunner& runner, const ModelConfig& c, int64_t batch,
                                           int64_t steps, bool overlapped) {
  static const SamplingParams greedy = greedy_params(), random = random_params();
  std::vector<Seq> seqs(batch);
  for (int64_t i = 0; i < batch; ++i) {
    seqs[i].tokens = random_tokens(20 + 9 * i, c.vocab_size, 40 + uint32_t(i));
    seqs[i].table = scattered_table(8, int32_t(12 * i));
  }
  // Everything but the last prompt token of each, in one step.
  ForwardBatch prefill;
  for (Seq& s : seqs) {
    prefill.seqs.push_back({std::span(s.tokens).first(s.tokens.size() - 1), 0, s.table, false});
    s.computed = int64_t(s.tokens.size()) - 1;
  }
  std::vector<float> unused;
  runner.forward(prefill, unused);

  std::vector<int32_t> drawn;
  std::vector<std::vector<int32_t>> one(batch);
  int64_t launched_rows = 0;
  for (int64_t step = 0; step <= steps; ++step) {
    if (step < steps) {
      ForwardBatch b;
      std::vector<SampleSpec> specs;
      for (int64_t i = 0; i < batch; ++i) {
        Seq& s = seqs[i];
        // Overlapped, a sequence's last token is not on the host yet after the first step.
        const bool fed_back = overlapped && step > 0;
        one[i] = {fed_back ? token_from_last_launch(i) : s.tokens.back()};
        b.seqs.push_back({one[i], s.computed, s.table, true});
        specs.push_back({i % 2 ? &random : &greedy, 77 + uint64_t(i), step});
        s.computed += 1;
      }
      if (!overlapped) {
        EXPECT_TRUE(runner.forward_sample(b, specs, drawn)) << "step " << step;
        for (int64_t i = 0; i < batch; ++i) seqs[i].tokens.push_back(drawn[i]);
        continue;
      }
      EXPECT_TRUE(runner.launch_sample(b, specs));
      launched_rows = batch;
    }
    if (!overlapped || step == 0) continue;
    runner.collect_sample(drawn);
    EXPECT_EQ(int64_t(drawn.size()), launched_rows);
    for (int64_t i = 0; i < batch; ++i) seqs[i].tokens.push_back(drawn[i]);
  }
  std::vector<std::vector<int32_t>> out;
  for (const Seq& s : seqs) out.push_back(s.tokens);
  return out;
}

TEST(CudaRunnerOverlap, FedBackTokensMatchTheHostsFeedback) {
  OPTIMATE_REQUIRE_GPU();
  const ModelConfig c = small_config(true);
  for (bool graphs : {true, false}) {
    for (int64_t batch : {1, 3, 5}) {
      CudaRunnerOptions o = small_options();
      o.cuda_graphs = graphs;
      CudaModelRunner sync(make_dummy_weights(c, 21), o);
      CudaModelRunner overlapped(make_dummy_weights(c, 21), o);
      const auto want = generate(sync, c, batch, 10, false);
      const auto got = generate(overlapped, c, batch, 10, true);
      for (int64_t i = 0; i < batch; ++i)
        EXPECT_EQ(got[i], want[i]) << "sequence " << i << ", batch " << batch << (graphs ? ", graphs" : ", eager");
    }
  }
}

TEST(CudaRunnerOverlap, AChunkBesideFedBackDecodes) {
  OPTIMATE_REQUIRE_GPU();
  const ModelConfig c = small_config(true);
  CudaModelRunner runner(make_dummy_weights(c, 3), small_options());
  static const SamplingParams greedy = greedy_params();
  const std::vector<int32_t> a = random_tokens(30, c.vocab_size, 1), b = random_tokens(50, c.vocab_size, 2);
  const std::vector<int32_t> ta = scattered_table(6, 0), tb = scattered_table(6, 40);
  // Reference, one step at a time: a's prompt; then a decodes while b prefills; then both decode.
  std::vector<int32_t> ref;
  {
    CudaModelRunner one(make_dummy_weights(c, 3), small_options());
    std::vector<int32_t> t;
    ASSERT_TRUE(one.forward_sample({{SeqSlice{a, 0, ta, true}}}, std::vector<SampleSpec>{{&greedy, 0, 0}}, t));
    ref.push_back(t[0]);
    const std::vector<int32_t> a1 = {t[0]};
    ASSERT_TRUE(one.forward_sample({{SeqSlice{a1, 30, ta, true}, SeqSlice{b, 0, tb, true}}},
                                   std::vector<SampleSpec>{{&greedy, 0, 1}, {&greedy, 0, 0}}, t));
    ref.insert(ref.end(), t.begin(), t.end());
    const std::vector<int32_t> a2 = {t[0]}, b1 = {t[1]};
    ASSERT_TRUE(one.forward_sample({{SeqSlice{a2, 31, ta, true}, SeqSlice{b1, 50, tb, true}}},
                                   std::vector<SampleSpec>{{&greedy, 0, 2}, {&greedy, 0, 1}}, t));
    ref.insert(ref.end(), t.begin(), t.end());
  }
  std::vector<int32_t> got, t;
  ASSERT_TRUE(runner.launch_sample({{SeqSlice{a, 0, ta, true}}}, std::vector<SampleSpec>{{&greedy, 0, 0}}));
  const std::vector<int32_t> fed0 = {token_from_last_launch(0)};
  ASSERT_TRUE(runner.launch_sample({{SeqSlice{fed0, 30, ta, true}, SeqSlice{b, 0, tb, true}}},
                                   std::vector<SampleSpec>{{&greedy, 0, 1}, {&greedy, 0, 0}}));
  runner.collect_sample(t);
  got.insert(got.end(), t.begin(), t.end());
  const std::vector<int32_t> fed1 = {token_from_last_launch(1)};
  ASSERT_TRUE(runner.launch_sample({{SeqSlice{fed0, 31, ta, true}, SeqSlice{fed1, 50, tb, true}}},
                                   std::vector<SampleSpec>{{&greedy, 0, 2}, {&greedy, 0, 1}}));
  runner.collect_sample(t);
  got.insert(got.end(), t.begin(), t.end());
  runner.collect_sample(t);
  got.insert(got.end(), t.begin(), t.end());
  EXPECT_EQ(got, ref);
}

TEST(CudaRunnerOverlap, MisuseIsRefused) {
  OPTIMATE_REQUIRE_GPU();
  const ModelConfig c = small_config(true);
  CudaModelRunner runner(make_dummy_weights(c, 3), small_options());
  static const SamplingParams greedy = greedy_params();
  std::vector<int32_t> t;
  EXPECT_THROW(runner.collect_sample(t), Error);
  const std::vector<int32_t> a = random_tokens(10, c.vocab_size, 1), table = scattered_table(2, 0);
  const std::vector<int32_t> fed = {token_from_last_launch(0)};
  // No launch before: a fed-back token names nothing.
  EXPECT_THROW(runner.launch_sample({{SeqSlice{fed, 10, table, true}}}, std::vector<SampleSpec>{{&greedy, 0, 0}}),
               Error);
  ASSERT_TRUE(runner.launch_sample({{SeqSlice{a, 0, table, true}}}, std::vector<SampleSpec>{{&greedy, 0, 0}}));
  std::vector<float> logits;
  EXPECT_THROW(runner.forward({{SeqSlice{a, 0, table, true}}}, logits), Error) << "a launch is uncollected";
  const std::vector<int32_t> fed_far = {token_from_last_launch(1)};  // the last launch drew one row
  EXPECT_THROW(runner.launch_sample({{SeqSlice{fed_far, 10, table, true}}}, std::vector<SampleSpec>{{&greedy, 0, 1}}),
               Error);
  runner.collect_sample(t);
  EXPECT_EQ(t.size(), 1u);
}

}  // namespace
}  // namespace optimate::cuda
