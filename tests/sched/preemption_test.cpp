// Preemption by recomputation as a user sees it: a sequence that loses its KV gives every
// block back, keeps the tokens it generated, resumes after the longest prefix of its own
// blocks still in the prefix cache, and continues exactly where it stopped (its k-th token is
// always 100 + k here, so a repeated or skipped token shows in its stream).
#include <gtest/gtest.h>

#include "optim/sched_harness.h"

namespace optimate::testing {
namespace {

constexpr int64_t kBlocks = 6;  // four-token blocks: 24 tokens of KV in all

sched::SchedulerConfig config(bool prefix_caching, int64_t max_num_batched_tokens = 8) {
  sched::SchedulerConfig c = small_config(4, max_num_batched_tokens, kBlocks, 24);
  c.enable_prefix_caching = prefix_caching;
  return c;
}

TEST(Preemption, ChunkedPrefillRunsDryAndResumesFromItsCachedBlocks) {
  // a decodes 12 tokens (it holds up to 4 blocks); b's 20-token prompt goes in chunks of 8
  // and needs 5 blocks: the pool runs dry in the middle of b's prefill, twice.
  SchedHarness h(config(true), {}, 1);
  h.set_token_source(counting_token);
  h.add_request("a", token_range(1, 4), tokens(12));
  h.add_request("b", token_range(50, 20), tokens(2));
  const ExpectedStep steps[] = {
      {"a:0+4* b:0+4", 4},
      {"a:4+1* b:4+7", 1},   // b has computed 11 tokens: 2 full blocks registered
      {"a:5+1* !b", 4},      // b's next chunk needs 2 blocks, 1 is free: b gives back 3
      {"a:6+1* b:8+7", 0},   // b resumes after its 2 cached blocks
      {"a:7+1* !b", 4},      // dry again: b gives back 4, 3 of them full and cached
      {"a:8+1*", 3},         // b would need 2 fresh blocks besides its 3 cached ones
      {"a:9+1*", 3},
      {"a:10+1*", 3},
      {"a:11+1*", 3},
      {"a:12+1*", 2},        // a's 4th block evicts b's cached tail block (LRU front)
      {"a:13+1*", 2},
      {"a:14+1*", 6},        // a is done
      {"b:8+8", 2},          // b's first 2 blocks are still cached
      {"b:16+4*", 1},
      {"b:20+1*", 6},
  };
  expect_steps(h, steps);
  EXPECT_FALSE(h.scheduler().has_unfinished());
  EXPECT_EQ(h.streamed("a"), counted(12));
  EXPECT_EQ(h.streamed("b"), counted(2));
  const sched::SchedulerSnapshot s = h.scheduler().snapshot();
  EXPECT_EQ(s.num_preemptions, 2);
  // Lookups that led to an admission: a (4 tokens), b three times (20 each).
  EXPECT_EQ(s.prefix_cache_queries, 4 + 3 * 20);
  EXPECT_EQ(s.prefix_cache_hits, 8 + 8);
  // Every prompt chunk that ran counts, recomputed ones too: a's 4, b's 4 + 7, 7, 8 + 4.
  EXPECT_EQ(s.num_prompt_tokens, 4 + (4 + 7) + 7 + (8 + 4));
  ASSERT_NE(h.finished("b"), nullptr);
  EXPECT_EQ(h.finished("b")->usage.cached_tokens, 0);  // what its first admission found
}

struct ResumeCase {
  const char* name;
  bool prefix_caching;
  std::vector<ExpectedStep> resume;  // the steps after b lost its KV
  int64_t prefix_hits_tokens;
  int64_t num_prompt_tokens;
};

TEST(Preemption, ADecodingVictimKeepsItsTokensAndContinuesWhereItStopped) {
  // a and b decode side by side in 6 blocks; at step 10 a needs a 4th block and b, the newer,
  // loses its 3 (it has generated 9 tokens). a finishes in that step, and b recomputes its
  // 13 tokens, chunked by the budget of 8 unless its blocks are still cached.
  const ResumeCase cases[] = {
      {"prefix cache: b resumes after its 2 surviving full blocks (a's block took the 3rd)",
       true, {{"b:8+5*", 2}, {"b:13+1*", 2}, {"b:14+1*", 2}}, 8, 8},
      {"no prefix cache: b recomputes all 13 tokens in two chunks", false,
       {{"b:0+8", 4}, {"b:8+5*", 2}, {"b:13+1*", 2}}, 0, 12},
  };
  for (const ResumeCase& c : cases) {
    SCOPED_TRACE(c.name);
    SchedHarness h(config(c.prefix_caching), {}, 1);
    h.set_token_source(counting_token);
    h.add_request("a", token_range(1, 4), tokens(10));
    h.add_request("b", token_range(50, 4), tokens(16));
    const ExpectedStep before[] = {
        {"a:0+4* b:0+4*", 4}, {"a:4+1* b:4+1*", 2}, {"a:5+1* b:5+1*", 2},
        {"a:6+1* b:6+1*", 2}, {"a:7+1* b:7+1*", 2}, {"a:8+1* b:8+1*", 0},
        {"a:9+1* b:9+1*", 0}, {"a:10+1* b:10+1*", 0}, {"a:11+1* b:11+1*", 0},
        {"a:12+1* !b", kBlocks},
    };
    expect_steps(h, before);
    const sched::Request* b = h.request("b");
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->status, sched::RequestStatus::kWaiting);
    EXPECT_EQ(b->num_computed_tokens, 0);
    EXPECT_EQ(b->num_output_tokens(), 9);  // kept, and not reported twice
    EXPECT_EQ(h.streamed("b"), counted(9));
    expect_steps(h, c.resume, 11);
    h.run_to_end();
    EXPECT_EQ(h.streamed("a"), counted(10));
    EXPECT_EQ(h.streamed("b"), counted(16));
    const sched::SchedulerSnapshot s = h.scheduler().snapshot();
    EXPECT_EQ(s.num_preemptions, 1);
    EXPECT_EQ(s.prefix_cache_hits, c.prefix_hits_tokens);
    EXPECT_EQ(s.num_prompt_tokens, c.num_prompt_tokens);
    EXPECT_EQ(s.num_generation_tokens, 10 + 16);
    EXPECT_EQ(h.free_blocks(), kBlocks);
  }
}

TEST(Preemption, AResumedSequenceGoesBeforeRequestsQueuedBeforeItsPreemption) {
  // As above, and c arrives while the pool is full: when b loses its KV at step 10 it is
  // queued ahead of c, which has waited since step 9.
  SchedHarness h(config(true), {}, 1);
  h.add_request("a", token_range(1, 4), tokens(10));
  h.add_request("b", token_range(50, 4), tokens(16));
  for (int i = 0; i < 8; ++i) h.step();
  h.add_request("c", token_range(80, 4), tokens(2));
  const ExpectedStep steps[] = {
      {"a:11+1* b:11+1*", 0},
      {"a:12+1* !b", kBlocks},
      {"b:8+5* c:0+3", 1},
  };
  expect_steps(h, steps, 9);
  h.run_to_end();
  EXPECT_EQ(h.free_blocks(), kBlocks);
}

TEST(Preemption, AdmissionHitsBlocksItsVictimFreedInTheSameStep) {
  // v (priority 0) and w (priority 3) share an 8-token prefix. w does not fit beside v, so the
  // priority optimizer preempts v for it, and w's admission in that same step hits the two
  // prefix blocks v just gave back: they are free yet cached, and counted as free room.
  const OptimizerSpec priority{"priority", {{"min_run_ms", 0.0}, {"preempt_after_ms", 0.0}}};
  SchedHarness h(config(true, 32), build_optimizers({priority}), 1);
  h.set_token_source(counting_token);
  std::vector<int32_t> shared = token_range(1, 8);
  std::vector<int32_t> v_prompt = shared, w_prompt = shared;
  v_prompt.insert(v_prompt.end(), {60, 61});
  const std::vector<int32_t> w_own = token_range(70, 12);
  w_prompt.insert(w_prompt.end(), w_own.begin(), w_own.end());
  h.add_request("v", v_prompt, tokens(8), 0);
  const ExpectedStep v_alone[] = {{"v:0+10*", 3}, {"v:10+1*", 3}, {"v:11+1*", 3}, {"v:12+1*", 2}};
  expect_steps(h, v_alone);
  const auto& kv = h.scheduler().kv();
  const std::vector<int32_t> v_blocks(kv.block_ids(h.request("v")->seq_id).begin(),
                                      kv.block_ids(h.request("v")->seq_id).end());
  ASSERT_EQ(v_blocks.size(), 4u);

  h.add_request("w", w_prompt, tokens(2), 3);
  h.step();
  EXPECT_EQ(h.described(), "w:8+12* !v");  // v's decode left the plan with its blocks
  const auto w_blocks = kv.block_ids(h.request("w")->seq_id);
  ASSERT_EQ(w_blocks.size(), 5u);
  EXPECT_EQ(w_blocks[0], v_blocks[0]);
  EXPECT_EQ(w_blocks[1], v_blocks[1]);
  EXPECT_EQ(kv.pool().ref_count(w_blocks[0]), 1);
  EXPECT_EQ(kv.pool().counters().evictions, 0);  // the fresh blocks held nothing cached
  EXPECT_EQ(kv.pool().counters().prefix_hits_tokens, 8);
  EXPECT_EQ(h.free_blocks(), 1);

  const ExpectedStep rest[] = {
      {"w:20+1*", kBlocks},  // v still does not fit beside w; w is done
      {"v:8+6*", 2},         // v resumes on the shared prefix: 10 prompt + 4 generated tokens
  };
  expect_steps(h, rest, 6);
  h.run_to_end();
  EXPECT_EQ(h.streamed("w"), counted(2));
  EXPECT_EQ(h.streamed("v"), counted(8));
  EXPECT_EQ(kv.pool().counters().prefix_hits_tokens, 8 + 8);
  EXPECT_EQ(h.free_blocks(), kBlocks);
}

}  // namespace
}  // namespace optimate::testing
