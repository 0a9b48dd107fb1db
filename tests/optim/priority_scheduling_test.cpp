// Priority scheduling as a user of the engine sees it: who gets admitted first, that the
// least important class still gets in within its bound under overload, and that a more
// important request displaces a less important one whether the batch is full on sequence
// slots or on KV blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "optim/priority_queue_policy.h"
#include "optim/sched_harness.h"

namespace optimate::testing {
namespace {

constexpr int64_t kStepNs = 10'000'000;  // 10 ms per step

sched::SchedulerConfig config(int64_t max_num_seqs, int64_t num_blocks = 256) {
  sched::SchedulerConfig c;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = 256;
  c.max_model_len = 64;
  c.block_size = 4;
  c.num_kv_blocks = num_blocks;
  c.eos_token_ids = {0};
  return c;
}

OptimizerSpec priority(OptionMap options = {}) { return {"priority", std::move(options)}; }

const optim::Policy& queue_policy(SchedHarness& h) { return *h.scheduler().policies().queue; }

TEST(PriorityScheduling, HigherPriorityIsAdmittedFirst) {
  SchedHarness h(config(1), build_optimizers({priority({{"preempt", false}})}), kStepNs);
  h.add("low", 8, 2, 0);
  h.add("critical", 8, 2, 3);
  h.add("medium", 8, 2, 1);
  h.add("high", 8, 2, 2);
  std::vector<std::string> admitted;
  while (h.scheduler().has_unfinished()) {
    const auto plan = h.step();
    for (const auto& s : plan.seqs)
      if (s.start_pos == 0) admitted.push_back(h.scheduler().find(s.seq_id)->request_id);
  }
  EXPECT_EQ(h.timeline().num_preempted, 0);
  EXPECT_EQ(admitted, (std::vector<std::string>{"critical", "high", "medium", "low"}));
}

TEST(PriorityScheduling, FcfsBaselineAdmitsInArrivalOrder) {
  SchedHarness h(config(1), {}, kStepNs);
  h.add("low", 8, 2, 0);
  h.add("critical", 8, 2, 3);
  h.step();
  EXPECT_TRUE(h.running("low"));
  EXPECT_TRUE(h.waiting("critical"));
}

TEST(PriorityScheduling, LevelsClampOutOfRangePriorities) {
  OptimizerSpec spec = priority({{"levels", int64_t{3}}, {"lowest_priority", int64_t{1}}});
  optim::OptionReader reader(spec);
  const optim::PriorityOptions o = optim::PriorityOptions::read(reader);
  EXPECT_EQ(o.level_of(EnginePriority{-5}), 0);
  EXPECT_EQ(o.level_of(EnginePriority{1}), 0);
  EXPECT_EQ(o.level_of(EnginePriority{2}), 1);
  EXPECT_EQ(o.level_of(EnginePriority{3}), 2);
  EXPECT_EQ(o.level_of(EnginePriority{1000}), 2);
  EXPECT_EQ(o.level_of(EnginePriority{std::numeric_limits<int64_t>::max()}), 2);
  EXPECT_EQ(o.level_of(EnginePriority{std::numeric_limits<int64_t>::min()}), 0);
  EXPECT_EQ(o.level_name(2), "high");
  EXPECT_THROW(build_optimizers({priority({{"levels", int64_t{0}}})}), Error);
  EXPECT_THROW(build_optimizers({priority({{"max_wait_ms_critical", 10.0}, {"levels", int64_t{3}}})}), Error);
  EXPECT_THROW(build_optimizers({priority({{"aging", 1.0}})}), Error);  // typo: no such option
}

// Waits are durations the clock can hold: finite, at most 10^12 ms (a batch hold at most a
// minute); a value past that is refused rather than overflowing into no wait at all.
TEST(PriorityScheduling, DurationOptionsAreFiniteAndBounded) {
  EXPECT_NO_THROW(build_optimizers({priority({{"max_wait_ms", 1e12}})}));
  EXPECT_THROW(build_optimizers({priority({{"max_wait_ms", 1e15}})}), Error);
  EXPECT_THROW(build_optimizers({priority({{"aging_ms", std::numeric_limits<double>::infinity()}})}), Error);
  EXPECT_THROW(build_optimizers({priority({{"min_run_ms", std::nan("")}})}), Error);
  EXPECT_NO_THROW(build_optimizers({OptimizerSpec{"predictive", {{"max_wait_ms", 60'000.0}}}}));
  EXPECT_THROW(build_optimizers({OptimizerSpec{"predictive", {{"max_wait_ms", 1e8}}}}), Error);
}

// Two slots and high-priority arrivals faster than the slots free up: the high queue never
// empties, so without a bound the one low request would wait forever.
Timeline overload(OptionMap options, int64_t run_ms) {
  SchedHarness h(config(2), build_optimizers({priority(std::move(options))}), kStepNs);
  int64_t next_high = 0;
  h.add("high" + std::to_string(next_high++), 8, 4, 3);
  h.add("high" + std::to_string(next_high++), 8, 4, 3);
  h.step();
  h.add("low", 8, 4, 0);
  while (h.clock().now_ns() < run_ms * 1'000'000) {
    h.add("high" + std::to_string(next_high++), 8, 4, 3);  // one per 10 ms step, 2 slots x 4 steps
    h.step();
  }
  return h.timeline();
}

TEST(PriorityScheduling, LowestLevelStarvesWithoutABound) {
  const Timeline t = overload({{"aging_ms", 0.0}, {"max_wait_ms", 1e9}}, 3000);
  EXPECT_EQ(t.first_scheduled_ns.count("low"), 0u);
}

TEST(PriorityScheduling, MaxWaitAdmitsTheLowestLevelWithinItsBound) {
  const Timeline t = overload({{"aging_ms", 0.0}, {"max_wait_ms_low", 500.0}}, 3000);
  ASSERT_EQ(t.first_scheduled_ns.count("low"), 1u);
  const int64_t waited_ns = t.first_scheduled_ns.at("low") - t.arrival_ns.at("low");
  // Its bound, plus at most the time for a slot to free (a 4-token request: 4 steps).
  EXPECT_GE(waited_ns, 500'000'000);
  EXPECT_LE(waited_ns, 500'000'000 + 4 * kStepNs);
  EXPECT_EQ(t.finished_ns.count("low"), 1u);
}

TEST(PriorityScheduling, AgingNeverLiftsARequestAcrossLevels) {
  // One level per 200 ms of waiting would have lifted the low request past fresh critical
  // ones after 600 ms; aging works inside a level only, so without a deadline it still waits.
  const Timeline t = overload({{"aging_ms", 200.0}, {"max_wait_ms", 1e9}}, 3000);
  EXPECT_EQ(t.first_scheduled_ns.count("low"), 0u);
}

TEST(PriorityScheduling, AgingOrdersPriorityValuesInsideALevel) {
  // Two levels from priority 0; 1 and 5 are both the top level (clamped). Inside it the larger
  // value goes first, until waiting has made up the difference: 4 units at 100 ms each.
  const OptionMap options = {{"levels", int64_t{2}}, {"aging_ms", 100.0}, {"max_wait_ms", 1e9},
                             {"preempt", false}};
  SchedHarness h(config(1), build_optimizers({priority(options)}), kStepNs);
  h.add("busy", 8, 1000, 1);
  h.step();
  h.add("one", 8, 4, 1);
  h.add("five-early", 8, 4, 5);
  h.clock().advance_ns(500'000'000);  // "one" now ranks as 6, above a fresh 5
  h.add("five-late", 8, 4, 5);
  h.scheduler().abort("busy");
  std::vector<std::string> admitted;
  while (h.scheduler().has_unfinished()) {
    const auto plan = h.step();
    for (const auto& s : plan.seqs)
      if (s.start_pos == 0) admitted.push_back(h.scheduler().find(s.seq_id)->request_id);
  }
  EXPECT_EQ(admitted, (std::vector<std::string>{"five-early", "one", "five-late"}));
}

TEST(PriorityScheduling, LowerFirstClientsGetLevelsByDefault) {
  // vLLM's clients send 0 for ordinary work and larger values for background work: with the
  // default options the four levels must still tell them apart.
  OptimizerSpec spec = priority();
  optim::OptionReader reader(spec);
  const optim::PriorityOptions o = optim::PriorityOptions::read(reader, PriorityOrder::kLowerFirst);
  auto level = [&](int64_t client) {
    return o.level_of(to_engine_priority(PriorityOrder::kLowerFirst, ClientPriority{client}));
  };
  EXPECT_EQ(level(0), 3);
  EXPECT_EQ(level(1), 2);
  EXPECT_EQ(level(2), 1);
  EXPECT_EQ(level(3), 0);
  EXPECT_EQ(level(100), 0);
  EXPECT_EQ(level(-7), 3);
}

TEST(PriorityScheduling, PreemptsForMoreImportantWhenMaxNumSeqsIsFull) {
  // preempt_after_ms (default 200) waits only for KV blocks: blocked for a slot, at once.
  SchedHarness h(config(2), build_optimizers({priority({{"min_run_ms", 0.0}})}), kStepNs);
  h.add("low-a", 8, 20, 0);
  h.add("low-b", 8, 20, 0);
  h.step();
  ASSERT_TRUE(h.running("low-a") && h.running("low-b"));
  h.add("low-c", 8, 20, 0);   // arrives later than low-b: must stay behind it
  h.add("high", 8, 20, 2);
  const auto plan = h.step();
  EXPECT_TRUE(h.running("high"));
  ASSERT_EQ(plan.preempted.size(), 1u);
  // The newest of the least important lost its slot...
  EXPECT_TRUE(h.waiting("low-b"));
  EXPECT_TRUE(h.running("low-a"));
  EXPECT_EQ(counter(queue_policy(h), "preemptions_for_max_num_seqs"), 1);
  EXPECT_EQ(counter(queue_policy(h), "preemptions_for_kv_blocks"), 0);
  // ...and kept its place: when a slot frees, it resumes before low-c, which came later.
  while (!h.running("low-b")) {
    ASSERT_FALSE(h.running("low-c"));
    h.step();
  }
  EXPECT_TRUE(h.waiting("low-c"));
}

TEST(PriorityScheduling, PreemptsForMoreImportantWhenKvBlocksRunOut) {
  // 16 blocks of 4 tokens; the two low requests hold 7 blocks each after their prefill.
  SchedHarness h(config(8, 16), build_optimizers({priority({{"min_run_ms", 0.0}, {"preempt_after_ms", 0.0}})}),
                 kStepNs);
  h.add("low-a", 27, 30, 0);
  h.add("low-b", 27, 30, 0);
  h.step();
  ASSERT_TRUE(h.running("low-a") && h.running("low-b"));
  EXPECT_EQ(h.scheduler().kv().pool().num_free_blocks(), 2);
  h.add("high", 20, 4, 3);  // needs 5 blocks
  const auto plan = h.step();
  EXPECT_TRUE(h.running("high"));
  EXPECT_EQ(plan.preempted.size(), 1u);
  EXPECT_TRUE(h.waiting("low-b"));
  EXPECT_EQ(counter(queue_policy(h), "preemptions_for_kv_blocks"), 1);
  EXPECT_EQ(counter(queue_policy(h), "preemptions_for_max_num_seqs"), 0);
  while (h.scheduler().has_unfinished()) h.step();
  EXPECT_EQ(h.scheduler().kv().pool().num_free_blocks(), 16);
}

TEST(PriorityScheduling, ARequestShortOfKvBlocksPreemptsOnlyAfterPreemptAfterMs) {
  // 20 blocks of 4 tokens; the two low requests hold 7 blocks each after their prefill, 8 as
  // they decode, and the high one needs 10. With 2 sequence slots it is blocked for a slot
  // first, and would still be short of blocks: it waits all the same.
  for (const int64_t max_num_seqs : {8, 2}) {
    SCOPED_TRACE(max_num_seqs);
    SchedHarness h(config(max_num_seqs, 20),
                   build_optimizers({priority({{"min_run_ms", 0.0}, {"preempt_after_ms", 40.0}})}), kStepNs);
    h.add("low-a", 27, 50, 0);
    h.add("low-b", 27, 50, 0);
    h.step();
    h.add("high", 40, 20, 3);
    // Steps of 10 ms: for the first 30 ms of its wait the running requests keep their blocks.
    for (int i = 0; i < 3; ++i) {
      h.step();
      ASSERT_TRUE(h.waiting("high")) << "step " << i;
      ASSERT_TRUE(h.running("low-a") && h.running("low-b")) << "step " << i;
    }
    EXPECT_GT(counter(queue_policy(h), "preemptions_deferred"), 0);
    for (int i = 0; i < 3 && !h.running("high"); ++i) h.step();
    EXPECT_TRUE(h.running("high"));
    EXPECT_EQ(counter(queue_policy(h), "preemptions_for_kv_blocks") +
                  counter(queue_policy(h), "preemptions_for_max_num_seqs"), 1);
    while (h.scheduler().has_unfinished()) h.step();
    EXPECT_EQ(h.scheduler().kv().pool().num_free_blocks(), 20);
  }
}

TEST(PriorityScheduling, TheVictimIsTheLeastImportantRequestWithTheLeastWorkToRedo) {
  SchedHarness h(config(2), build_optimizers({priority({{"min_run_ms", 0.0}})}), kStepNs);
  h.add("low-old-short", 8, 20, 0);
  h.add("low-new-long", 24, 20, 0);
  h.step();
  ASSERT_TRUE(h.running("low-old-short") && h.running("low-new-long"));
  h.add("high", 8, 20, 2);
  const auto plan = h.step();
  EXPECT_TRUE(h.running("high"));
  ASSERT_EQ(plan.preempted.size(), 1u);
  // 9 tokens to compute again rather than 25, though it arrived first.
  EXPECT_TRUE(h.waiting("low-old-short"));
  EXPECT_TRUE(h.running("low-new-long"));
}

TEST(PriorityScheduling, AShortageOfBlocksTakesOneVictimThatCoversIt) {
  // 24 blocks of 4 tokens: the small low request holds 2, the big one 10, 12 are free, and the
  // high one needs 15. The small one alone would not make room; the big one does.
  SchedHarness h(config(8, 24), build_optimizers({priority({{"min_run_ms", 0.0}, {"preempt_after_ms", 0.0}})}),
                 kStepNs);
  h.add("low-small", 6, 20, 0);
  h.add("low-big", 38, 20, 0);
  h.step();
  ASSERT_TRUE(h.running("low-small") && h.running("low-big"));
  h.add("high", 60, 4, 3);
  const auto plan = h.step();
  EXPECT_TRUE(h.running("high"));
  EXPECT_EQ(plan.preempted.size(), 1u);
  EXPECT_TRUE(h.waiting("low-big"));
  EXPECT_TRUE(h.running("low-small"));
  while (h.scheduler().has_unfinished()) h.step();
  EXPECT_EQ(h.scheduler().kv().pool().num_free_blocks(), 24);
}

// Admitting a request takes the blocks for its whole prompt and the pool's watermark (1%
// while others run), not only its first chunk's: no victim is taken whose blocks, with every
// other candidate's, could not make that room.
TEST(PriorityScheduling, NoVictimIsTakenWhoseBlocksCannotAdmitTheRequest) {
  sched::SchedulerConfig c = config(8, 200);
  c.max_num_batched_tokens = 64;  // a first chunk of 16 blocks would fit in what is free
  c.max_model_len = 800;
  SchedHarness h(c, build_optimizers({priority({{"min_run_ms", 0.0}, {"preempt_after_ms", 0.0}})}), kStepNs);
  h.add("high-run", 400, 200, 3);  // 100 blocks
  h.add("low", 80, 200, 0);        // 20 blocks
  for (int i = 0; i < 12; ++i) h.step();
  ASSERT_TRUE(h.running("high-run") && h.running("low"));
  h.add("high-new", 436, 10, 3);  // 109 blocks and the watermark's 2: more than free and low's
  const auto plan = h.step();
  EXPECT_TRUE(plan.preempted.empty());
  EXPECT_TRUE(h.running("low"));
  EXPECT_TRUE(h.waiting("high-new"));
  EXPECT_EQ(counter(queue_policy(h), "preemptions_for_kv_blocks"), 0);
}

TEST(PriorityScheduling, RecentlyAdmittedRequestsAreNotPreemptedAgain) {
  SchedHarness h(config(1), build_optimizers({priority({{"min_run_ms", 100.0}})}), kStepNs);
  h.add("low", 8, 50, 0);
  h.step();
  h.add("high", 8, 50, 3);
  // The low request was admitted 10 ms ago: it keeps its slot until 100 ms have passed.
  for (int i = 0; i < 9; ++i) {
    h.step();
    ASSERT_TRUE(h.running("low")) << "step " << i;
  }
  h.step();
  EXPECT_TRUE(h.running("high"));
  EXPECT_TRUE(h.waiting("low"));
  EXPECT_GT(counter(queue_policy(h), "preemptions_refused_min_run"), 0);
}

TEST(PriorityScheduling, EqualLevelsNeverPreemptEachOther) {
  SchedHarness h(config(1), build_optimizers({priority({{"min_run_ms", 0.0}})}), kStepNs);
  h.add("first", 8, 5, 2);
  h.step();
  h.add("second", 8, 5, 2);
  while (h.running("first")) h.step();
  EXPECT_EQ(h.timeline().num_preempted, 0);
}

TEST(PriorityScheduling, VictimOnKvExhaustionIsTheLeastImportant) {
  // Decodes grow until the pool runs dry mid-step: the baseline would drop the newest
  // (the critical one); the priority victim policy drops the low one.
  SchedHarness h(config(8, 16), build_optimizers({priority({{"min_run_ms", 0.0}})}), kStepNs);
  h.add("low", 16, 40, 0);
  h.step();
  h.add("critical", 16, 40, 3);
  while (h.timeline().num_preempted == 0 && h.scheduler().has_unfinished()) h.step();
  EXPECT_TRUE(h.waiting("low"));
  EXPECT_FALSE(h.waiting("critical"));
  EXPECT_EQ(counter(*h.scheduler().policies().preempt, "preemptions_kv_exhausted"), 1);
}

}  // namespace
}  // namespace optimate::testing
