// The tokens of a request do not depend on what else runs with it: chunked prefill, prefix
// hits, preemption and recomputation are invisible in the output.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

struct Case {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
};

std::vector<Case> mixed_requests(int count, bool seeded) {
  std::mt19937 rng(1234);
  std::vector<int32_t> shared_prefix;
  for (int i = 0; i < 24; ++i) shared_prefix.push_back(2 + static_cast<int32_t>(rng() % 60));
  std::vector<Case> cases;
  for (int i = 0; i < count; ++i) {
    Case c;
    c.id = "r" + std::to_string(i);
    // A third share a prefix (prefix-cache hits); prompt lengths 3..100 (chunked past 64).
    if (i % 3 == 0) c.prompt = shared_prefix;
    const int len = 3 + static_cast<int>(rng() % 98);
    while (static_cast<int>(c.prompt.size()) < len) c.prompt.push_back(2 + static_cast<int32_t>(rng() % 60));
    c.params.max_tokens = 4 + static_cast<int64_t>(rng() % 28);
    if (seeded) {
      c.params.temperature = 0.9f;
      c.params.top_p = 0.95f;
      c.params.seed = 1000 + i;
    } else {
      c.params.temperature = 0.0f;
    }
    cases.push_back(c);
  }
  return cases;
}

void expect_invariant(bool seeded) {
  const auto cases = mixed_requests(32, seeded);
  FakeEngineOptions small_pool;
  small_pool.num_blocks = 96;  // 384 token slots for 32 requests of up to 130 tokens: preemption

  Results alone;
  for (const Case& c : cases) {
    Engine engine = make_fake_engine();
    engine.add_request(c.id, c.prompt, c.params);
    for (auto& [key, r] : run_to_completion(engine)) alone[key] = r;
  }

  Engine engine = make_fake_engine(small_pool);
  for (const Case& c : cases) engine.add_request(c.id, c.prompt, c.params);
  const Results together = run_to_completion(engine);

  const auto& stats = engine.scheduler().stats();
  const auto& counters = engine.scheduler().kv().pool().counters();
  EXPECT_GT(stats.num_preemptions, 0);
  EXPECT_GT(counters.prefix_hits_tokens, 0);
  ASSERT_EQ(together.size(), cases.size());
  for (const Case& c : cases) {
    const SeqResult& a = alone.at({c.id, 0});
    const SeqResult& b = together.at({c.id, 0});
    EXPECT_EQ(a.tokens, b.tokens) << c.id;
    EXPECT_EQ(a.text, b.text) << c.id;
    EXPECT_EQ(a.reason, b.reason) << c.id;
    EXPECT_EQ(b.num_finished, 1) << c.id;
  }
  EXPECT_EQ(engine.scheduler().kv().pool().num_free_blocks(), small_pool.num_blocks);
}

TEST(BatchInvariance, GreedyAloneEqualsAmong32Concurrent) { expect_invariant(false); }

TEST(BatchInvariance, SeededSamplingIndependentOfBatch) { expect_invariant(true); }

TEST(BatchInvariance, ParallelSamplesShareThePromptAndMatchSingleRuns) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 37; ++i) prompt.push_back(2 + (i * 13) % 60);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = 12;
  greedy.ignore_eos = true;

  Engine single = make_fake_engine();
  single.add_request("one", prompt, greedy);
  const Results one = run_to_completion(single);

  SamplingParams n3 = greedy;
  n3.n = 3;
  Engine engine = make_fake_engine();
  engine.add_request("three", prompt, n3);
  const Results three = run_to_completion(engine);
  ASSERT_EQ(three.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(three.at({"three", i}).tokens, one.at({"one", 0}).tokens) << i;
    EXPECT_EQ(three.at({"three", i}).num_finished, 1);
  }
  // Siblings fork the first sample's full prompt blocks: only the partial last block and the
  // generated tokens are computed again (37-token prompt, 4-token blocks: 36 shared).
  const auto& runner = static_cast<const FakeModelRunner&>(engine.runner());
  EXPECT_EQ(runner.num_forward_tokens(), 37 + 2 * 1 + 3 * 11);
  EXPECT_EQ(engine.scheduler().kv().pool().num_free_blocks(), 256);
}

TEST(BatchInvariance, SeededParallelSamplesDiffer) {
  std::vector<int32_t> prompt = {5, 6, 7, 8, 9, 10, 11};
  SamplingParams p;
  p.temperature = 1.0f;
  p.max_tokens = 16;
  p.ignore_eos = true;
  p.seed = 7;
  p.n = 2;
  Engine engine = make_fake_engine();
  engine.add_request("s", prompt, p);
  const Results r = run_to_completion(engine);
  EXPECT_NE(r.at({"s", 0}).tokens, r.at({"s", 1}).tokens);
}

}  // namespace
}  // namespace optimate::testing
