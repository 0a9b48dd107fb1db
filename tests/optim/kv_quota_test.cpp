// The KV quota per priority class, as a controller sets it (Scheduler::set_policy_knobs) and
// the queue and preemption policies enforce it: a reserve for the most important class, a cap
// on one class's long generations, and over-share victims first. Both the baselines and the
// priority optimizer honour it; without a quota nothing changes.
#include <gtest/gtest.h>

#include "optim/kv_quota.h"
#include "optim/sched_harness.h"

namespace optimate::testing {
namespace {

sched::SchedulerConfig small_pool(int64_t num_blocks) {
  sched::SchedulerConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 512;
  c.max_model_len = std::min<int64_t>(256, num_blocks * 4);
  c.block_size = 4;
  c.num_kv_blocks = num_blocks;
  c.enable_prefix_caching = false;
  return c;
}

class KvQuota : public ::testing::TestWithParam<bool> {
 protected:
  // The priority optimizer, or the baselines.
  optim::PolicySet policies() const {
    if (!GetParam()) return {};
    return build_optimizers({{"priority", {{"levels", int64_t{3}}, {"lowest_priority", int64_t{1}}}}});
  }
};

TEST_P(KvQuota, ReserveKeepsBlocksForTheMostImportantClass) {
  SchedHarness h(small_pool(40), policies(), 1'000'000);
  optim::PolicyKnobs knobs;
  knobs.kv_quota.reserve_blocks = 10;
  knobs.kv_quota.reserve_min_priority = EnginePriority{3};
  h.scheduler().set_policy_knobs(knobs);
  h.add("low-big", 100, 50, 1);   // 25 blocks: 15 left, above the reserve
  h.step();
  h.add("low-small", 24, 50, 1);  // 6 more would leave 9 < 10
  h.add("high", 24, 50, 3);
  h.step();
  EXPECT_TRUE(h.running("low-big"));
  EXPECT_TRUE(h.waiting("low-small"));
  EXPECT_TRUE(h.running("high"));

  // Without the quota the same request goes in.
  h.scheduler().set_policy_knobs({});
  h.step();
  EXPECT_TRUE(h.running("low-small"));
}

TEST_P(KvQuota, LongGenerationsOfOneClassStopAtTheirShare) {
  SchedHarness h(small_pool(100), policies(), 1'000'000);
  optim::PolicyKnobs knobs;
  knobs.kv_quota.long_max_share = 0.5;  // 50 blocks
  knobs.kv_quota.long_min_tokens = 100;
  h.scheduler().set_policy_knobs(knobs);
  h.add("long-1", 80, 120, 1);  // 20 blocks each
  h.add("long-2", 80, 120, 1);
  h.add("long-3", 80, 120, 1);  // 40 + 20 > 50: waits
  h.add("short", 80, 10, 1);    // not a long generation
  h.add("long-high", 80, 120, 3);  // another class, holding nothing yet
  h.step();
  EXPECT_TRUE(h.running("long-1"));
  EXPECT_TRUE(h.running("long-2"));
  EXPECT_TRUE(h.waiting("long-3"));
  EXPECT_TRUE(h.running("short"));
  EXPECT_TRUE(h.running("long-high"));
  // Every request still finishes: the share limits, it never starves.
  for (int i = 0; i < 2000 && h.scheduler().has_unfinished(); ++i) h.step();
  EXPECT_FALSE(h.scheduler().has_unfinished());
  EXPECT_EQ(h.timeline().finished_ns.size(), 5u);
}

TEST_P(KvQuota, AnOverShareLongGenerationIsTheVictimWhenThePoolRunsDry) {
  for (const bool quota : {false, true}) {
    SchedHarness h(small_pool(30), policies(), 1'000'000);
    if (quota) {
      optim::PolicyKnobs knobs;
      knobs.kv_quota.long_max_share = 0.2;
      knobs.kv_quota.long_min_tokens = 100;
      h.scheduler().set_policy_knobs(knobs);
    }
    h.add("long", 40, 100, 1);  // arrives first: the baseline's victim is the other one
    h.add("short", 40, 60, 1);
    for (int i = 0; i < 500 && h.timeline().num_preempted == 0; ++i) h.step();
    ASSERT_GT(h.timeline().num_preempted, 0);
    const sched::Request* first = h.request(quota ? "long" : "short");
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(first->num_preemptions, 1) << (quota ? "with" : "without") << " the quota";
  }
}

// A footprint limit (what kv_quant sets while an important request runs): a less important
// request waits once the running sequences' blocks and its own would pass it, however many
// blocks are free; a more important one does not, admissions earlier in the order count, and
// once one request is held none of its priority or below goes past it (smaller ones behind
// would otherwise take every room it waits for).
TEST_P(KvQuota, AFootprintLimitHoldsBackOnlyTheLessImportant) {
  SchedHarness h(small_pool(100), policies(), 1'000'000);
  optim::PolicyKnobs knobs;
  knobs.kv_quota.footprint_blocks = 20;
  knobs.kv_quota.footprint_min_priority = EnginePriority{3};
  h.scheduler().set_policy_knobs(knobs);
  h.add("low-big", 60, 50, 1);    // 15 blocks
  h.add("low-small", 24, 50, 1);  // 6 more: past 20 whichever goes first
  h.add("mid-tiny", 12, 50, 2);   // 3 more: 20 with the high one
  h.add("low-tiny", 4, 50, 1);    // 1 more would fit, but low-small waits ahead of it
  h.add("high", 8, 50, 3);        // 2 blocks, not limited
  h.step();
  EXPECT_TRUE(h.running("low-big"));
  EXPECT_TRUE(h.waiting("low-small"));
  EXPECT_TRUE(h.running("mid-tiny"));
  EXPECT_TRUE(h.waiting("low-tiny"));
  EXPECT_TRUE(h.running("high"));
  h.scheduler().set_policy_knobs({});
  h.step();
  EXPECT_TRUE(h.running("low-small"));
  EXPECT_TRUE(h.running("low-tiny"));
}

// The footprint counts the blocks in use once each, however many sequences share them (a
// cached prefix, the siblings of n > 1).
TEST(KvQuotaFootprint, SharedBlocksCountOnce) {
  std::vector<optim::RequestView> running(2), waiting(1);
  for (auto& r : running) r.num_blocks = 10;  // 8 of them shared
  waiting[0].num_prompt_tokens = 16;          // 4 blocks of 4
  optim::SchedulerView view;
  view.running = running;
  view.waiting = waiting;
  view.kv.block_size = 4;
  view.kv.num_blocks = 100;
  view.kv.num_free_blocks = 88;
  view.kv.used_blocks_by_code[0] = 12;
  view.token_budget_left = 64;
  view.knobs.kv_quota.footprint_blocks = 16;
  view.knobs.kv_quota.footprint_min_priority = EnginePriority{1};
  EXPECT_EQ(optim::apply_kv_quota(view, {0}), std::vector<int64_t>{0});  // 12 + 4: fits
  view.knobs.kv_quota.footprint_blocks = 15;
  EXPECT_TRUE(optim::apply_kv_quota(view, {0}).empty());
}

INSTANTIATE_TEST_SUITE_P(Policies, KvQuota, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "priority" : "baselines"; });

}  // namespace
}  // namespace optimate::testing
