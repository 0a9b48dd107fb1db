#include <gtest/gtest.h>

#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

std::vector<int32_t> long_prompt(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(2 + (i * 7 + salt) % 60);
  return p;
}

TEST(PrefixCache, HitGivesIdenticalTokensAndSkipsCachedPrefill) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = 10;
  greedy.ignore_eos = true;
  const auto prompt = long_prompt(50, 3);  // 12 full blocks of 4, then 2 tokens

  FakeEngineOptions off;
  off.prefix_caching = false;
  Engine cold = make_fake_engine(off);
  cold.add_request("a", prompt, greedy);
  const Results reference = run_to_completion(cold);

  Engine engine = make_fake_engine();
  engine.add_request("first", prompt, greedy);
  const Results first = run_to_completion(engine);
  const auto& runner = static_cast<const FakeModelRunner&>(engine.runner());
  const int64_t tokens_before = runner.num_forward_tokens();
  engine.add_request("second", prompt, greedy);
  const Results second = run_to_completion(engine);

  EXPECT_EQ(first.at({"first", 0}).tokens, reference.at({"a", 0}).tokens);
  EXPECT_EQ(second.at({"second", 0}).tokens, reference.at({"a", 0}).tokens);
  // 48 prompt tokens come from the cache: 2 prompt tokens + 9 decodes are computed.
  EXPECT_EQ(runner.num_forward_tokens() - tokens_before, 2 + 9);
  EXPECT_EQ(second.at({"second", 0}).usage.cached_tokens, 48);
  const auto& counters = engine.scheduler().kv().pool().counters();
  EXPECT_EQ(counters.prefix_queries_tokens, 100);
  EXPECT_EQ(counters.prefix_hits_tokens, 48);
}

TEST(PrefixCache, DifferentPrefixNoHit) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = 4;
  Engine engine = make_fake_engine();
  engine.add_request("x", long_prompt(40, 1), greedy);
  run_to_completion(engine);
  auto other = long_prompt(40, 1);
  other[0] = other[0] == 2 ? 3 : 2;  // first block differs, so every chained hash differs
  engine.add_request("y", other, greedy);
  const Results r = run_to_completion(engine);
  EXPECT_EQ(r.at({"y", 0}).usage.cached_tokens, 0);
}

TEST(PrefixCache, ResetForgetsCachedPrefixesAndKeepsRunningBlocks) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = 12;
  greedy.ignore_eos = true;
  const auto cached = long_prompt(50, 3);
  const auto running = long_prompt(30, 5);

  Engine reference_engine = make_fake_engine();
  reference_engine.add_request("r", running, greedy);
  const Results reference = run_to_completion(reference_engine);

  Engine engine = make_fake_engine();
  engine.add_request("first", cached, greedy);
  run_to_completion(engine);
  engine.add_request("running", running, greedy);
  Results results;
  for (int i = 0; i < 3; ++i) collect(engine.step(), results);  // prefilled, decoding
  const auto& pool = engine.scheduler().kv().pool();
  const int64_t used_before = pool.num_blocks() - pool.num_free_blocks();
  ASSERT_GT(used_before, 0);

  engine.reset_prefix_cache();
  EXPECT_EQ(pool.num_blocks() - pool.num_free_blocks(), used_before);
  while (engine.has_unfinished()) collect(engine.step(), results);
  // The running request's KV was left alone: it finishes exactly as without the reset.
  EXPECT_EQ(results.at({"running", 0}).tokens, reference.at({"r", 0}).tokens);
  // The earlier prompt's cached blocks are forgotten.
  engine.add_request("again", cached, greedy);
  const Results again = run_to_completion(engine);
  EXPECT_EQ(again.at({"again", 0}).usage.cached_tokens, 0);
}

}  // namespace
}  // namespace optimate::testing
