// The scheduler's mechanism on its own: token budget, decodes before prefills, chunking,
// max_num_seqs, preemption when the pool runs dry.
#include <gtest/gtest.h>

#include "core/error.h"
#include "sched/scheduler.h"

namespace optimate::sched {
namespace {

SchedulerConfig small_config() {
  SchedulerConfig c;
  c.max_num_seqs = 3;
  c.max_num_batched_tokens = 10;
  c.max_model_len = 64;
  c.block_size = 4;
  c.num_kv_blocks = 16;
  c.eos_token_ids = {0};
  return c;
}

std::shared_ptr<const SamplingParams> params(int64_t max_tokens) {
  auto p = std::make_shared<SamplingParams>();
  p->max_tokens = max_tokens;
  return p;
}

// Samples token 7 for every row.
StepResult sevens(const StepPlan& plan) {
  StepResult r;
  for (const auto& s : plan.seqs)
    if (s.want_logits) r.tokens.push_back({7, std::nullopt});
  return r;
}

TEST(Scheduler, BudgetChunksPrefillAndRunsDecodesFirst) {
  FakeClock clock;
  Scheduler s(small_config(), {}, clock);
  s.add_request("a", std::vector<int32_t>(6, 3), params(5), {}, 0);
  s.add_request("b", std::vector<int32_t>(9, 3), params(5), {}, 0);
  StepPlan p1 = s.schedule();
  ASSERT_EQ(p1.seqs.size(), 2u);
  EXPECT_EQ(p1.num_tokens, 10);
  EXPECT_TRUE(p1.seqs[0].want_logits);          // a: whole prompt
  EXPECT_EQ(p1.seqs[1].token_ids.size(), 4u);   // b: first chunk
  EXPECT_FALSE(p1.seqs[1].want_logits);
  s.update(p1, sevens(p1));
  StepPlan p2 = s.schedule();
  ASSERT_EQ(p2.seqs.size(), 2u);
  EXPECT_EQ(p2.seqs[0].token_ids, std::vector<int32_t>{7});  // a's decode first
  EXPECT_EQ(p2.seqs[1].start_pos, 4);                        // b continues its prefill
  EXPECT_EQ(p2.seqs[1].token_ids.size(), 5u);
}

TEST(Scheduler, MaxNumSeqsAndPreemptionFreeEverything) {
  FakeClock clock;
  SchedulerConfig c = small_config();
  c.num_kv_blocks = 16;
  c.max_num_batched_tokens = 64;
  Scheduler s(c, {}, clock);
  for (int i = 0; i < 5; ++i)
    s.add_request("r" + std::to_string(i), std::vector<int32_t>(14, 3), params(30), {}, 0);
  int64_t steps = 0;
  while (s.has_unfinished()) {
    StepPlan p = s.schedule();
    EXPECT_LE(static_cast<int64_t>(p.seqs.size()), 3);
    s.update(p, sevens(p));
    ASSERT_LT(++steps, 1000);
  }
  EXPECT_GT(s.stats().num_preemptions, 0);
  EXPECT_EQ(s.kv().pool().num_free_blocks(), 16);
  EXPECT_EQ(s.stats().num_generated_tokens, 5 * 30);
}

// vLLM's block-manager watermark: while others run, a new request is admitted only if the
// blocks for its whole prompt (not just the first chunk) leave kv_watermark of the pool free,
// room the running sequences grow into; alone, it may take the whole pool.
TEST(Scheduler, ANewRequestLeavesTheWatermarkFreeWhileOthersRun) {
  FakeClock clock;
  SchedulerConfig c = small_config();
  c.num_kv_blocks = 200;  // 1%: 2 blocks
  c.max_model_len = 800;
  c.max_num_batched_tokens = 1024;  // every prompt whole in the first step
  c.max_num_seqs = 8;
  Scheduler s(c, {}, clock);
  s.add_request("first", std::vector<int32_t>(600, 3), params(4), {}, 0);  // 150 blocks
  s.add_request("fits", std::vector<int32_t>(188, 4), params(4), {}, 0);   // 47: 3 left
  s.add_request("over", std::vector<int32_t>(8, 5), params(4), {}, 0);     // 2 more: 1 left
  StepPlan p = s.schedule();
  s.update(p, sevens(p));
  EXPECT_EQ(s.num_running(), 2);  // "over" waits though its 2 blocks are free
  while (s.has_unfinished()) {
    p = s.schedule();
    s.update(p, sevens(p));
  }
  EXPECT_EQ(s.stats().num_generated_tokens, 12);
  EXPECT_EQ(s.kv().pool().num_free_blocks(), 200);

  // Alone it may fill the pool; without a watermark the third is admitted at once.
  c.kv_watermark = 0.0;
  Scheduler plain(c, {}, clock);
  plain.add_request("first", std::vector<int32_t>(600, 3), params(4), {}, 0);
  plain.add_request("fits", std::vector<int32_t>(188, 4), params(4), {}, 0);
  plain.add_request("over", std::vector<int32_t>(8, 5), params(4), {}, 0);
  p = plain.schedule();
  plain.update(p, sevens(p));
  EXPECT_EQ(plain.num_running(), 3);
  SchedulerConfig whole = small_config();
  whole.num_kv_blocks = 200;
  whole.max_model_len = 800;
  whole.max_num_batched_tokens = 1024;
  Scheduler alone(whole, {}, clock);
  alone.add_request("all", std::vector<int32_t>(796, 3), params(4), {}, 0);  // 199 blocks, then 200
  p = alone.schedule();
  alone.update(p, sevens(p));
  EXPECT_EQ(alone.num_running(), 1);
}

TEST(Scheduler, PoolSmallerThanModelLenIsAnError) {
  FakeClock clock;
  SchedulerConfig c = small_config();
  c.num_kv_blocks = 8;  // 32 tokens < max_model_len 64
  EXPECT_THROW(Scheduler(c, optim::PolicySet{}, clock), Error);
}

}  // namespace
}  // namespace optimate::sched
