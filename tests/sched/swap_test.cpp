// Swap preemption as a user sees it: a victim's blocks go to the host tier and come back by a
// copy, so it resumes with every token it had computed (no prefill again) one step after it
// is readmitted; a host tier too small means recomputing after all; an abort while swapped out
// or while its blocks are on their way back returns every block of both tiers. Its k-th token
// is always 100 + k here, so a repeated or skipped token shows in its stream.
#include <gtest/gtest.h>

#include "core/error.h"
#include "optim/sched_harness.h"

namespace optimate::testing {
namespace {

constexpr int64_t kBlocks = 6;  // four-token blocks: 24 tokens of KV in all

sched::SchedulerConfig config(int64_t host_swap_slots) {
  sched::SchedulerConfig c = small_config(4, 8, kBlocks, 24);
  c.host_slots.swap = host_swap_slots;
  c.preemption_mode = PreemptionMode::kSwap;
  return c;
}

// a and b decode side by side in 6 blocks; at step 10 a needs a 4th block and b, the newer,
// gives its 3 back (12 tokens computed, 9 generated).
void run_until_b_is_preempted(SchedHarness& h, const char* preempt_step) {
  h.set_token_source(counting_token);
  h.add_request("a", token_range(1, 4), tokens(10));
  h.add_request("b", token_range(50, 4), tokens(16));
  const ExpectedStep before[] = {
      {"a:0+4* b:0+4*", 4}, {"a:4+1* b:4+1*", 2}, {"a:5+1* b:5+1*", 2},
      {"a:6+1* b:6+1*", 2}, {"a:7+1* b:7+1*", 2}, {"a:8+1* b:8+1*", 0},
      {"a:9+1* b:9+1*", 0}, {"a:10+1* b:10+1*", 0}, {"a:11+1* b:11+1*", 0},
      {preempt_step, kBlocks},
  };
  expect_steps(h, before);
}

int64_t preemptions(const sched::SchedulerSnapshot& s, const std::string& mode, const std::string& reason) {
  auto m = s.preemptions_by_mode.find(mode);
  if (m == s.preemptions_by_mode.end()) return 0;
  auto r = m->second.find(reason);
  return r == m->second.end() ? 0 : r->second;
}

TEST(SwapPreemption, AVictimResumesWithItsBlocksCopiedBack) {
  SchedHarness h(config(8), {}, 1);
  run_until_b_is_preempted(h, "a:12+1* !b out:3");
  const sched::Request* b = h.request("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->status, sched::RequestStatus::kWaiting);
  EXPECT_EQ(b->num_computed_tokens, 12);  // kept: its blocks are in host memory
  EXPECT_TRUE(h.scheduler().kv().is_swapped(b->seq_id));
  EXPECT_EQ(h.scheduler().kv().host().num_free_swap_blocks(), 5);
  // a finished in step 10. b's blocks come back in step 11, which runs nothing else; b
  // computes again from step 12 on, where it stopped.
  const ExpectedStep resume[] = {{"in:3", 3}, {"b:12+1*", 2}, {"b:13+1*", 2}};
  expect_steps(h, resume, 11);
  EXPECT_EQ(h.scheduler().kv().host().num_free_swap_blocks(), 8);
  h.run_to_end();
  EXPECT_EQ(h.streamed("b"), counted(16));
  const sched::SchedulerSnapshot s = h.scheduler().snapshot();
  EXPECT_EQ(s.num_preemptions, 1);
  EXPECT_EQ(preemptions(s, "swap", "forced"), 1);
  EXPECT_EQ(s.kv_swapped_out_blocks, 3);
  EXPECT_EQ(s.kv_swapped_in_blocks, 3);
  EXPECT_EQ(s.num_prompt_tokens, 4 + 4);  // no prompt token computed twice
  EXPECT_EQ(s.preempted_ns, 2);  // preempted at the start of step 10, caught up at the end of step 12
  EXPECT_EQ(h.free_blocks(), kBlocks);
}

TEST(SwapPreemption, AHostTierTooSmallMeansRecomputing) {
  SchedHarness h(config(2), {}, 1);
  run_until_b_is_preempted(h, "a:12+1* !b");
  EXPECT_EQ(h.request("b")->num_computed_tokens, 0);
  h.run_to_end();
  EXPECT_EQ(h.streamed("b"), counted(16));
  const sched::SchedulerSnapshot s = h.scheduler().snapshot();
  EXPECT_EQ(preemptions(s, "recompute", "host_full"), 1);
  EXPECT_EQ(s.kv_swapped_out_blocks, 0);
  EXPECT_EQ(h.scheduler().kv().host().num_free_swap_blocks(), 2);
}

TEST(SwapPreemption, AbortWhileSwappedOutOrComingBackReturnsEveryBlock) {
  for (const bool during_swap_in : {false, true}) {
    SCOPED_TRACE(during_swap_in ? "aborted after the step that copies it back" : "aborted while swapped out");
    SchedHarness h(config(8), {}, 1);
    run_until_b_is_preempted(h, "a:12+1* !b out:3");
    if (during_swap_in) {
      h.step();
      EXPECT_EQ(h.described(), "in:3");
      EXPECT_TRUE(h.running("b"));
    }
    const auto outs = h.scheduler().abort("b");
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_EQ(outs[0].finish_reason, sched::FinishReason::kAbort);
    EXPECT_FALSE(h.scheduler().has_unfinished());
    EXPECT_EQ(h.free_blocks(), kBlocks);
    EXPECT_EQ(h.scheduler().kv().host().num_free_swap_blocks(), 8);
    EXPECT_EQ(h.scheduler().kv().num_swapped(), 0);
  }
}

TEST(SwapPreemption, SwapModeWithoutSwapSpaceIsRefused) {
  try {
    SchedHarness h(config(0), {}, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("swap-space"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace optimate::testing
