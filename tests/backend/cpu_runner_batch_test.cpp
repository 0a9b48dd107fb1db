// The CPU runner gives each sequence the same logits whether it runs alone or batched with
// others, with its prefill split into chunks and its blocks scattered through the cache.
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_model_runner.h"
#include "core/error.h"
#include "tiny_model.h"

namespace optimate::cpu {
namespace {

constexpr int64_t kBlockSize = 4;

struct Seq {
  std::vector<int32_t> prompt;
  std::vector<int32_t> decode;   // tokens fed one per step after the prompt
  std::vector<int32_t> blocks;   // block table
  std::vector<int32_t> all() const {
    std::vector<int32_t> t = prompt;
    t.insert(t.end(), decode.begin(), decode.end());
    return t;
  }
};

std::vector<Seq> make_seqs() {
  // Prompts of 11, 5 and 17 tokens, each followed by 3 decodes; block tables interleaved so
  // that no sequence's blocks are contiguous.
  std::vector<Seq> seqs(3);
  const int lengths[] = {11, 5, 17};
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < lengths[s]; ++i) seqs[s].prompt.push_back((7 * i + 13 * s + 3) % 101);
    seqs[s].decode = {(5 + s) % 101, (40 + s) % 101, (77 + s) % 101};
    const int64_t num_blocks = (lengths[s] + 3 + kBlockSize - 1) / kBlockSize;
    for (int64_t b = 0; b < num_blocks; ++b) seqs[s].blocks.push_back(static_cast<int32_t>(3 * (num_blocks - b) + s));
  }
  return seqs;
}

// Logits after the prompt and after each decode, running the sequence alone.
std::vector<std::vector<float>> run_alone(CpuModelRunner& runner, const Seq& seq) {
  std::vector<std::vector<float>> out;
  std::vector<float> logits;
  runner.forward({.seqs = {{.token_ids = seq.prompt, .start_pos = 0, .block_table = seq.blocks}}}, logits);
  out.push_back(logits);
  for (size_t i = 0; i < seq.decode.size(); ++i) {
    std::span<const int32_t> tok(&seq.decode[i], 1);
    runner.forward({.seqs = {{.token_ids = tok,
                              .start_pos = static_cast<int64_t>(seq.prompt.size() + i),
                              .block_table = seq.blocks}}},
                   logits);
    out.push_back(logits);
  }
  return out;
}

void expect_close(std::span<const float> got, std::span<const float> want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    // fp32 both ways; only the GEMM blocking differs between a batch and a single row.
    if (std::fabs(got[i] - want[i]) > 1e-4f + 1e-4f * std::fabs(want[i]) && mismatches++ < 5)
      ADD_FAILURE() << what << ": logit " << i << " is " << got[i] << ", alone " << want[i];
  }
}

class CpuRunnerBatch : public ::testing::TestWithParam<bool> {};

TEST_P(CpuRunnerBatch, ChunkedMixedBatchMatchesEachSequenceAlone) {
  const ModelConfig config = testing::tiny_config(/*attention_bias=*/GetParam());
  const ModelWeights weights = testing::tiny_weights(config, 17);
  const CpuRunnerOptions options{.num_kv_blocks = 64, .block_size = kBlockSize, .num_threads = 2};
  const std::vector<Seq> seqs = make_seqs();

  CpuModelRunner alone_runner(config, weights, options);
  std::vector<std::vector<std::vector<float>>> alone;
  for (const Seq& s : seqs) alone.push_back(run_alone(alone_runner, s));

  // Step plan: (sequence, first token, token count, want logits); checked against `alone`.
  struct Part { int seq; int64_t start, count; bool logits; int check; };
  const std::vector<std::vector<Part>> steps = {
      {{0, 0, 6, false, -1}, {1, 0, 5, true, 0}, {2, 0, 8, false, -1}},
      {{1, 5, 1, true, 1}, {0, 6, 5, true, 0}, {2, 8, 7, false, -1}},
      {{2, 15, 2, true, 0}, {0, 11, 1, true, 1}, {1, 6, 1, true, 2}},
      {{0, 12, 1, true, 2}, {2, 17, 1, true, 1}, {1, 7, 1, true, 3}},
      {{2, 18, 1, true, 2}, {0, 13, 1, true, 3}},
      {{2, 19, 1, true, 3}},
  };
  CpuModelRunner runner(config, weights, options);
  std::vector<std::vector<int32_t>> tokens;
  for (const Seq& s : seqs) tokens.push_back(s.all());
  std::vector<float> logits;
  for (size_t step = 0; step < steps.size(); ++step) {
    ForwardBatch batch;
    for (const Part& p : steps[step])
      batch.seqs.push_back({.token_ids = std::span<const int32_t>(tokens[p.seq]).subspan(p.start, p.count),
                            .start_pos = p.start,
                            .block_table = seqs[p.seq].blocks,
                            .want_logits = p.logits});
    runner.forward(batch, logits);
    const int64_t vocab = config.vocab_size;
    ASSERT_EQ(static_cast<int64_t>(logits.size()),
              vocab * std::count_if(steps[step].begin(), steps[step].end(), [](const Part& p) { return p.logits; }));
    int64_t row = 0;
    for (const Part& p : steps[step]) {
      if (!p.logits) continue;
      expect_close(std::span<const float>(logits).subspan(row++ * vocab, vocab), alone[p.seq][p.check],
                   "step " + std::to_string(step) + " seq " + std::to_string(p.seq));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(LlamaAndQwen2, CpuRunnerBatch, ::testing::Values(false, true));

TEST(CpuRunner, TokenByTokenMatchesOneChunkOnMoreThreads) {
  // 100 tokens: enough attention work that the threaded path runs.
  const ModelConfig config = testing::tiny_config();
  const ModelWeights weights = testing::tiny_weights(config, 5);
  CpuModelRunner a(config, weights, {.num_kv_blocks = 32, .block_size = kBlockSize, .num_threads = 1});
  CpuModelRunner b(config, weights, {.num_kv_blocks = 32, .block_size = kBlockSize, .num_threads = 2});
  std::vector<int32_t> prompt(100);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 11) % 101);
  std::vector<int32_t> blocks(25);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<int32_t>((i * 7) % 25 + 3);
  std::vector<float> whole, step;
  b.forward({.seqs = {{.token_ids = prompt, .block_table = blocks}}}, whole);
  for (size_t i = 0; i < prompt.size(); ++i)
    a.forward({.seqs = {{.token_ids = std::span<const int32_t>(prompt).subspan(i, 1),
                         .start_pos = static_cast<int64_t>(i),
                         .block_table = blocks}}},
              step);
  expect_close(step, whole, "last prompt token");
}

TEST(CpuRunner, MicroBatchesGiveTheWholeBatchsLogits) {
  // Parts of 5 tokens cut every prompt, one of them in three, and put pieces of different
  // sequences in one part; the logits must be the one-pass runner's, all_logits rows included.
  const ModelConfig config = testing::tiny_config();
  const ModelWeights weights = testing::tiny_weights(config, 9);
  CpuModelRunner whole(config, weights, {.num_kv_blocks = 64, .block_size = kBlockSize, .num_threads = 2,
                                         .max_step_tokens = 0});
  CpuModelRunner parts(config, weights, {.num_kv_blocks = 64, .block_size = kBlockSize, .num_threads = 2,
                                         .max_step_tokens = 5});
  const std::vector<Seq> seqs = make_seqs();
  std::vector<std::vector<float>> logits(2);
  CpuModelRunner* runners[] = {&whole, &parts};
  for (int r = 0; r < 2; ++r) {
    ForwardBatch batch;
    for (size_t i = 0; i < seqs.size(); ++i)
      batch.seqs.push_back({.token_ids = seqs[i].prompt, .block_table = seqs[i].blocks, .want_logits = i != 1,
                            .all_logits = i == 2});
    runners[r]->forward(batch, logits[r]);
    // Then a decode step of every sequence, against the cache the parts wrote.
    std::vector<float> step;
    ForwardBatch decode;
    for (const Seq& s : seqs)
      decode.seqs.push_back({.token_ids = std::span<const int32_t>(s.decode).first(1),
                             .start_pos = static_cast<int64_t>(s.prompt.size()), .block_table = s.blocks});
    runners[r]->forward(decode, step);
    logits[r].insert(logits[r].end(), step.begin(), step.end());
  }
  // Rows: seq 0's last token, seq 2's 17 tokens, then the three decodes.
  ASSERT_EQ(static_cast<int64_t>(logits[0].size()), (1 + 17 + 3) * config.vocab_size);
  expect_close(logits[1], logits[0], "micro-batches of 5 tokens");
}

TEST(CpuRunner, RejectsBadSlices) {
  const ModelConfig config = testing::tiny_config();
  const ModelWeights weights = testing::tiny_weights(config, 5);
  CpuModelRunner runner(config, weights, {.num_kv_blocks = 4, .block_size = kBlockSize});
  std::vector<float> logits;
  const std::vector<int32_t> ok = {1, 2, 3, 4, 5}, bad_token = {1, 101};
  const std::vector<int32_t> one_block = {0}, two_blocks = {0, 1}, bad_block = {0, 4};
  EXPECT_THROW(runner.forward({.seqs = {{.token_ids = ok, .block_table = one_block}}}, logits), Error);
  EXPECT_THROW(runner.forward({.seqs = {{.token_ids = bad_token, .block_table = two_blocks}}}, logits), Error);
  EXPECT_THROW(runner.forward({.seqs = {{.token_ids = ok, .block_table = bad_block}}}, logits), Error);
  EXPECT_THROW(runner.forward({.seqs = {{.token_ids = {}, .block_table = two_blocks}}}, logits), Error);
  EXPECT_THROW(CpuModelRunner(config, weights, {.num_kv_blocks = 0}), Error);
  ModelWeights wrong = weights;
  wrong.layers[1].wk = make_f32_tensor("layers.1.wk", {8, 64}, std::vector<float>(8 * 64));
  EXPECT_THROW(CpuModelRunner(config, wrong, {.num_kv_blocks = 4}), Error);
}

}  // namespace
}  // namespace optimate::cpu
