// 10,000 requests, a fifth aborted at random points: every request finishes exactly once and
// every KV block returns to the pool; with swapping active, every block of both tiers too
// (aborts land on sequences swapped out, and on sequences whose blocks are being copied back).
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

void run_with_random_aborts(const FakeEngineOptions& o) {
  Engine engine = make_fake_engine(o);
  std::mt19937 rng(42);
  constexpr int kRequests = 10000;
  int next = 0;
  std::map<std::string, int> finished_count;   // sequence finishes per request
  std::map<std::string, int64_t> expected_seqs;
  std::map<int64_t, std::vector<std::string>> abort_at_step;
  std::set<std::string> aborted;
  int64_t step = 0;
  int64_t num_aborts_sent = 0;
  while (next < kRequests || engine.has_unfinished()) {
    // Keep a few hundred in flight, arriving in bursts.
    for (int burst = static_cast<int>(rng() % 12); burst > 0 && next < kRequests; --burst) {
      const std::string id = "q" + std::to_string(next++);
      std::vector<int32_t> prompt(1 + rng() % 40);
      for (auto& t : prompt) t = 2 + static_cast<int32_t>(rng() % 60);
      SamplingParams p;
      p.temperature = (rng() % 2) ? 0.0f : 0.8f;
      p.max_tokens = 1 + static_cast<int64_t>(rng() % 20);
      p.n = (rng() % 10 == 0) ? 2 : 1;
      engine.add_request(id, prompt, p);
      expected_seqs[id] = p.n;
      if (rng() % 5 == 0) abort_at_step[step + static_cast<int64_t>(rng() % 30)].push_back(id);
    }
    if (auto it = abort_at_step.find(step); it != abort_at_step.end()) {
      for (const auto& id : it->second) {
        ++num_aborts_sent;
        if (engine.abort(id)) aborted.insert(id);
        EXPECT_FALSE(engine.abort(id)) << "second abort of " << id;
      }
      abort_at_step.erase(it);
    }
    for (const auto& out : engine.step()) {
      ASSERT_TRUE(expected_seqs.count(out.request_id)) << out.request_id;
      if (out.finished) {
        ++finished_count[out.request_id];
        EXPECT_EQ(out.finish_reason == FinishReason::kAbort, aborted.count(out.request_id) == 1)
            << out.request_id;
      }
      ASSERT_LE(finished_count[out.request_id], expected_seqs[out.request_id]) << out.request_id;
    }
    ++step;
    ASSERT_LT(step, 2000000);
  }
  EXPECT_GT(num_aborts_sent, kRequests / 6);
  EXPECT_GT(aborted.size(), static_cast<size_t>(kRequests / 10));
  ASSERT_EQ(finished_count.size(), static_cast<size_t>(kRequests));
  for (const auto& [id, n] : expected_seqs) EXPECT_EQ(finished_count[id], n) << id;
  const auto& kv = engine.scheduler().kv();
  EXPECT_EQ(kv.pool().num_free_blocks(), o.num_blocks);
  EXPECT_EQ(kv.num_sequences(), 0);
  EXPECT_EQ(kv.num_swapped(), 0);
  EXPECT_EQ(kv.host().num_free_swap_blocks(), o.host_swap_blocks);
  EXPECT_GT(engine.scheduler().stats().num_preemptions, 0);
}

FakeEngineOptions small_pool() {
  FakeEngineOptions o;
  o.num_blocks = 160;
  o.max_num_seqs = 48;
  o.max_num_batched_tokens = 96;
  o.max_model_len = 128;
  return o;
}

TEST(AbortLeak, TenThousandRequestsWithRandomAborts) { run_with_random_aborts(small_pool()); }

TEST(AbortLeak, TenThousandRequestsWithRandomAbortsWhileSwapping) {
  FakeEngineOptions o = small_pool();
  o.preemption_mode = "swap";
  o.host_swap_blocks = 96;
  o.host_prefix_blocks = 64;
  run_with_random_aborts(o);
  // The same run again, checking that swapping and the host prefix tier were busy.
  Engine engine = make_fake_engine(o);
  std::mt19937 rng(7);
  for (int i = 0; i < 400; ++i) {
    std::vector<int32_t> prompt(8 + rng() % 40);
    for (auto& t : prompt) t = 2 + static_cast<int32_t>(rng() % 4);  // few distinct prefixes
    SamplingParams p;
    p.max_tokens = 1 + static_cast<int64_t>(rng() % 30);
    p.temperature = 0.0f;
    engine.add_request("r" + std::to_string(i), prompt, p);
  }
  run_to_completion(engine);
  const EngineStats s = engine.stats();
  EXPECT_GT(s.kv_swapped_out_blocks, 0);
  EXPECT_EQ(s.kv_swapped_in_blocks, s.kv_swapped_out_blocks);
  EXPECT_GT(s.host_prefix_cached_blocks, 0);
  EXPECT_EQ(s.host_swap_used_blocks, 0);
}

}  // namespace
}  // namespace optimate::testing
