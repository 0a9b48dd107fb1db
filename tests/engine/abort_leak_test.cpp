// 10,000 requests, a fifth aborted at random points: every request finishes exactly once and
// every KV block returns to the pool.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

TEST(AbortLeak, TenThousandRequestsWithRandomAborts) {
  FakeEngineOptions o;
  o.num_blocks = 160;
  o.max_num_seqs = 48;
  o.max_num_batched_tokens = 96;
  o.max_model_len = 128;
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
  EXPECT_GT(engine.scheduler().stats().num_preemptions, 0);
}

}  // namespace
}  // namespace optimate::testing
