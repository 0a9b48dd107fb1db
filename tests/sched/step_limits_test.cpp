// The two limits of a step, max_num_batched_tokens and max_num_seqs: running sequences go
// first in admission order (a decode token each, or the next chunk of a prefill), then
// waiting ones, each prompt chunked to what is left of the token budget. set_limits between
// steps applies from the next step on and never evicts what already runs.
#include <gtest/gtest.h>

#include "core/error.h"
#include "optim/sched_harness.h"

namespace optimate::testing {
namespace {

sched::SchedulerConfig config(int64_t max_num_seqs, int64_t max_num_batched_tokens) {
  return small_config(max_num_seqs, max_num_batched_tokens, 64, 64);
}

struct Arrival {
  const char* id;
  int64_t prompt_len;
  int64_t max_tokens;
};

struct LimitsCase {
  const char* name;
  int64_t max_num_seqs;
  int64_t max_num_batched_tokens;
  std::vector<Arrival> requests;  // all queued before the first step
  std::vector<const char*> plans; // every step until all finished, as describe() writes them
};

const LimitsCase kLimitsCases[] = {
    {"the budget chunks the later prompt; its rest follows the decode", 3, 10,
     {{"a", 6, 3}, {"b", 9, 2}},
     {"a:0+6* b:0+4", "a:6+1* b:4+5*", "a:7+1* b:9+1*"}},
    {"max_num_seqs holds the third request back until a slot frees", 2, 64,
     {{"a", 3, 2}, {"b", 3, 2}, {"c", 3, 2}},
     {"a:0+3* b:0+3*", "a:3+1* b:3+1*", "c:0+3*", "c:3+1*"}},
    {"decodes first, then a chunk of what the budget has left", 4, 5,
     {{"a", 2, 3}, {"b", 2, 3}, {"c", 12, 1}},
     {"a:0+2* b:0+2* c:0+1", "a:2+1* b:2+1* c:1+3", "a:3+1* b:3+1* c:4+3", "c:7+5*"}},
    {"decodes that take the whole budget keep waiting requests out", 4, 2,
     {{"a", 1, 3}, {"b", 1, 3}, {"c", 1, 3}},
     {"a:0+1* b:0+1*", "a:1+1* b:1+1*", "a:2+1* b:2+1*", "c:0+1*", "c:1+1*", "c:2+1*"}},
    {"a budget of one token", 4, 1, {{"a", 3, 2}}, {"a:0+1", "a:1+1", "a:2+1*", "a:3+1*"}},
    {"a running prefill's next chunk comes before a new admission", 4, 6,
     {{"a", 10, 1}, {"b", 2, 1}},
     {"a:0+6", "a:6+4* b:0+2*"}},
};

TEST(StepLimits, BudgetAndMaxNumSeqsShapeEachStep) {
  for (const LimitsCase& c : kLimitsCases) {
    SCOPED_TRACE(c.name);
    SchedHarness h(config(c.max_num_seqs, c.max_num_batched_tokens), {}, 1);
    for (const Arrival& r : c.requests) h.add(r.id, r.prompt_len, r.max_tokens, 0);
    std::vector<std::string> plans;
    while (h.scheduler().has_unfinished() && plans.size() < 20) {
      const sched::StepPlan plan = h.step();
      EXPECT_LE(plan.num_tokens, c.max_num_batched_tokens);
      EXPECT_LE(static_cast<int64_t>(plan.seqs.size()), c.max_num_seqs);
      plans.push_back(h.described());
    }
    EXPECT_EQ(plans, std::vector<std::string>(c.plans.begin(), c.plans.end()));
    for (const Arrival& r : c.requests)
      EXPECT_EQ(h.finished(r.id)->usage.completion_tokens, r.max_tokens) << r.id;
    EXPECT_EQ(h.free_blocks(), 64);
  }
}

TEST(StepLimits, SetLimitsTakesEffectAtTheNextStep) {
  SchedHarness h(config(1, 64), {}, 1);
  for (const char* id : {"a", "b", "c"}) h.add(id, 4, 3, 0);
  const struct {
    int64_t max_num_seqs;  // set before the step (0: unchanged)
    int64_t max_num_batched_tokens;
    const char* plan;
  } steps[] = {
      {0, 0, "a:0+4*"},
      {3, 6, "a:4+1* b:0+4* c:0+1"},
      {3, 2, "a:5+1* b:4+1*"},   // two decodes spend the budget: c's prefill pauses
      {0, 0, "b:5+1* c:1+1"},
      {1, 64, "c:2+2*"},
      {0, 0, "c:4+1*"},
      {0, 0, "c:5+1*"},
  };
  for (const auto& s : steps) {
    if (s.max_num_seqs > 0) h.scheduler().set_limits(s.max_num_seqs, s.max_num_batched_tokens);
    h.step();
    EXPECT_EQ(h.described(), s.plan);
  }
  EXPECT_FALSE(h.scheduler().has_unfinished());
}

TEST(StepLimits, LoweringMaxNumSeqsEvictsNothing) {
  SchedHarness h(config(3, 64), {}, 1);
  for (const char* id : {"a", "b", "c"}) h.add(id, 4, 3, 0);
  h.step();
  EXPECT_EQ(h.described(), "a:0+4* b:0+4* c:0+4*");
  h.scheduler().set_limits(1, 64);
  h.add("d", 4, 1, 0);
  h.step();
  EXPECT_EQ(h.described(), "a:4+1* b:4+1* c:4+1*");  // all three keep running; d waits
  h.step();
  EXPECT_EQ(h.described(), "a:5+1* b:5+1* c:5+1*");
  h.step();
  EXPECT_EQ(h.described(), "d:0+4*");
  EXPECT_EQ(h.scheduler().snapshot().num_preemptions, 0);
}

TEST(StepLimits, InvalidLimitsAreRefusedAndChangeNothing) {
  SchedHarness h(config(2, 16), {}, 1);
  const struct {
    int64_t max_num_seqs;
    int64_t max_num_batched_tokens;
  } bad[] = {{0, 16}, {2, 0}, {-1, -1}};
  for (const auto& b : bad) {
    try {
      h.scheduler().set_limits(b.max_num_seqs, b.max_num_batched_tokens);
      ADD_FAILURE() << "accepted " << b.max_num_seqs << ", " << b.max_num_batched_tokens;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    }
    EXPECT_EQ(h.scheduler().config().max_num_seqs, 2);
    EXPECT_EQ(h.scheduler().config().max_num_batched_tokens, 16);
  }
}

}  // namespace
}  // namespace optimate::testing
