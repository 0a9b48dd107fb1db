// n > 1: the samples of one request share the first sample's prompt KV instead of computing
// it n times. What a user notices: fewer blocks taken, the prompt computed once (only the
// block holding the last prompt token is recomputed, its logits are needed), siblings that
// wait for the first sample's prompt rather than duplicate it, and every sample still getting
// all of its tokens, whatever happens to its siblings.
#include <gtest/gtest.h>

#include "optim/sched_harness.h"

namespace optimate::testing {
namespace {

constexpr int64_t kBlocks = 32;

sched::SchedulerConfig config(int64_t max_num_batched_tokens, bool prefix_caching) {
  sched::SchedulerConfig c = small_config(8, max_num_batched_tokens, kBlocks, 64);
  c.enable_prefix_caching = prefix_caching;
  return c;
}

std::shared_ptr<const SamplingParams> samples(int64_t n, int64_t max_tokens) {
  auto p = std::make_shared<SamplingParams>();
  p->n = n;
  p->max_tokens = max_tokens;
  p->ignore_eos = true;
  return p;
}

struct SharingCase {
  const char* name;
  int64_t prompt_len;
  int64_t n;
  bool prefix_caching;
  bool first_ends_after_step1;    // a stop string ends it before its siblings start
  const char* step1;              // plans, as SchedHarness::describe writes them
  const char* step2;
  int64_t free_after_step1;       // free blocks (after the first sample ended, if it did)
  int64_t free_after_step2;
  int32_t first_block_refs;       // references to sample 1's first block after step 2
  int64_t prefix_hits_tokens;     // after step 2
  int64_t sibling_cached_tokens;  // usage.cached_tokens the siblings report
};

// Four-token blocks, 32 of them, budget 64, three tokens per sample: the first sample computes
// the whole prompt in step 1; the siblings join in step 2.
const SharingCase kSharingCases[] = {
    {"shares full blocks, recomputes the partial one", 10, 3, true, false, "r.0:0+10*",
     "r.0:10+1* r.1:8+2* r.2:8+2*", 29, 27, 3, 0, 8},
    {"a full last block is recomputed too (its logits)", 12, 3, true, false, "r.0:0+12*",
     "r.0:12+1* r.1:8+4* r.2:8+4*", 29, 26, 3, 0, 8},
    {"one full block", 5, 2, true, false, "r.0:0+5*", "r.0:5+1* r.1:4+1*", 30, 29, 2, 0, 4},
    {"prompt within one block: nothing to share", 4, 2, true, false, "r.0:0+4*",
     "r.0:4+1* r.1:0+4*", 31, 29, 1, 0, 0},
    {"shared without the prefix cache", 10, 3, false, false, "r.0:0+10*",
     "r.0:10+1* r.1:8+2* r.2:8+2*", 29, 27, 3, 0, 8},
    {"first sample already finished: the siblings hit its cached blocks", 10, 3, true, true,
     "r.0:0+10*", "r.1:8+2* r.2:8+2*", 32, 28, 2, 16, 8},
    {"first sample already finished, no prefix cache: recomputed", 10, 3, false, true,
     "r.0:0+10*", "r.1:0+10* r.2:0+10*", 32, 26, 1, 0, 0},
};

TEST(SiblingSharing, SiblingsShareTheFirstSamplesFullPromptBlocks) {
  for (const SharingCase& c : kSharingCases) {
    SCOPED_TRACE(c.name);
    SchedHarness h(config(64, c.prefix_caching), {}, 1);
    h.set_token_source(counting_token);
    h.add_request("r", token_range(1, c.prompt_len), samples(c.n, 3));
    h.step();
    EXPECT_EQ(h.described(), c.step1);
    if (c.first_ends_after_step1)
      h.scheduler().finish_sequence("r", 0, sched::FinishReason::kStop, std::string("stop"));
    EXPECT_EQ(h.free_blocks(), c.free_after_step1);
    h.step();
    EXPECT_EQ(h.described(), c.step2);
    EXPECT_EQ(h.free_blocks(), c.free_after_step2);
    const auto& kv = h.scheduler().kv();
    const sched::Request* sibling = h.request("r", 1);
    ASSERT_NE(sibling, nullptr);
    EXPECT_EQ(kv.pool().ref_count(kv.block_ids(sibling->seq_id)[0]), c.first_block_refs);
    EXPECT_EQ(kv.pool().counters().prefix_hits_tokens, c.prefix_hits_tokens);
    // A sibling's own blocks (past the shared ones) belong to it alone.
    for (int64_t i = 0; i < c.n; ++i) {
      const sched::Request* r = h.request("r", i);
      if (!r) continue;
      const auto blocks = kv.block_ids(r->seq_id);
      EXPECT_EQ(kv.pool().ref_count(blocks.back()), 1) << "sample " << i;
    }

    h.run_to_end();
    for (int64_t i = 0; i < c.n; ++i) {
      SCOPED_TRACE("sample " + std::to_string(i));
      const bool ended_early = i == 0 && c.first_ends_after_step1;
      EXPECT_EQ(h.streamed("r", i), counted(ended_early ? 1 : 3));
      if (ended_early) continue;
      ASSERT_NE(h.finished("r", i), nullptr);
      EXPECT_EQ(h.finished("r", i)->usage.cached_tokens, i == 0 ? 0 : c.sibling_cached_tokens);
    }
    EXPECT_EQ(h.free_blocks(), kBlocks);
    EXPECT_EQ(h.scheduler().kv().num_sequences(), 0);
  }
}

TEST(SiblingSharing, SiblingsWaitWhileTheFirstPromptIsComputed) {
  // A 20-token prompt in chunks of 8: the siblings stay queued (a later request goes ahead of
  // them) until the first sample's prompt is in the cache, then share 16 of its 20 tokens.
  SchedHarness h(config(8, true), {}, 1);
  h.add_request("r", token_range(1, 20), samples(2, 4));
  h.add_request("b", token_range(50, 4), samples(1, 4));
  const struct {
    const char* plan;
    int64_t waiting;
  } steps[] = {
      {"r.0:0+8", 2},                       // the sibling and b wait: the budget is spent
      {"r.0:8+8", 2},
      {"r.0:16+4* b:0+4*", 1},              // r.0 ends its prompt this step: not yet shareable
      {"r.0:20+1* b:4+1* r.1:16+4*", 0},    // shared: 4 blocks, the 5th recomputed
  };
  for (const auto& s : steps) {
    h.step();
    EXPECT_EQ(h.described(), s.plan);
    EXPECT_EQ(h.scheduler().num_waiting(), s.waiting) << s.plan;
  }
  const auto& kv = h.scheduler().kv();
  ASSERT_TRUE(h.running("r") && h.request("r", 1) != nullptr);
  const auto parent = kv.block_ids(h.request("r", 0)->seq_id);
  const auto sibling = kv.block_ids(h.request("r", 1)->seq_id);
  ASSERT_EQ(sibling.size(), 5u);
  for (size_t b = 0; b < 4; ++b) EXPECT_EQ(sibling[b], parent[b]);
  EXPECT_NE(sibling[4], parent[4]);
  // The prompt was computed once and its last block twice; b's prompt once.
  EXPECT_EQ(h.scheduler().snapshot().num_prompt_tokens, 20 + 4 + 4);
  h.run_to_end();
  EXPECT_EQ(h.free_blocks(), kBlocks);
}

struct AbortCase {
  const char* name;
  bool prefix_caching;
  int64_t abort_index;     // which sample ends (-1: the whole request)
  int64_t abort_after;     // steps run before it ends
  const char* next_plan;   // the step after
  int64_t free_after_abort;
  int64_t samples_finishing;  // samples that still produce all their tokens
};

// r: 20-token prompt, n = 3, chunks of 8 (its first sample is mid-prefill after 1 or 2 steps).
const AbortCase kAbortCases[] = {
    {"first sample ends mid-prefill: siblings reuse its cached blocks", true, 0, 2,
     "r.1:16+4* r.2:16+4*", kBlocks, 2},
    {"first sample ends mid-prefill, no prefix cache: siblings start over", false, 0, 2,
     "r.1:0+8", kBlocks, 2},
    {"a waiting sibling ends: the others are unaffected", true, 1, 1, "r.0:8+8", kBlocks - 2, 2},
    {"the whole request ends mid-prefill", true, -1, 2, "", kBlocks, 0},
    {"a sibling sharing blocks ends: only its own block comes back", true, 2, 4,
     "r.0:21+1* r.1:20+1*", kBlocks - 7, 2},
};

TEST(SiblingSharing, EndingASampleOrTheRequestMidPrefill) {
  for (const AbortCase& c : kAbortCases) {
    SCOPED_TRACE(c.name);
    SchedHarness h(config(8, c.prefix_caching), {}, 1);
    h.set_token_source(counting_token);
    h.add_request("r", token_range(1, 20), samples(3, 4));
    for (int64_t i = 0; i < c.abort_after; ++i) h.step();
    if (c.abort_index < 0) {
      const auto outputs = h.scheduler().abort("r");
      ASSERT_EQ(outputs.size(), 3u);
      for (const auto& out : outputs) EXPECT_EQ(out.finish_reason, sched::FinishReason::kAbort);
    } else {
      h.scheduler().finish_sequence("r", c.abort_index, sched::FinishReason::kAbort, {});
    }
    EXPECT_EQ(h.free_blocks(), c.free_after_abort);
    h.step();
    EXPECT_EQ(h.described(), c.next_plan);
    h.run_to_end();
    int64_t complete = 0;
    for (int64_t i = 0; i < 3; ++i) complete += h.streamed("r", i) == counted(4) ? 1 : 0;
    EXPECT_EQ(complete, c.samples_finishing);
    EXPECT_EQ(h.free_blocks(), kBlocks);
  }
}

}  // namespace
}  // namespace optimate::testing
