// The prefix cache seen from the scheduler: identical prompts admitted in the same step each
// compute their prefix (neither is in the cache yet), and that content must stay findable for
// as long as any of them holds it, not only while the first one's copy survives.
#include <gtest/gtest.h>

#include "optim/sched_harness.h"

namespace optimate::testing {
namespace {


TEST(SchedPrefixCache, IdenticalPromptsComputedTogetherStayCachedWhileOneRuns) {
  SchedHarness h(small_config(4, 64, 8, 32), {}, 1);
  const std::vector<int32_t> prompt = token_range(1, 9);  // 2 full blocks and one token
  h.add_request("x", prompt, tokens(1));
  h.add_request("y", prompt, tokens(10));
  const ExpectedStep together[] = {{"x:0+9* y:0+9*", 5}};  // x is done: its 3 blocks are free
  expect_steps(h, together);
  // z takes 4 blocks, the last two of them x's freed (cached) copies of the prompt.
  h.add_request("z", token_range(200, 16), tokens(1));
  const ExpectedStep fill[] = {{"y:9+1* z:0+16*", 5}};
  expect_steps(h, fill, 2);
  // w repeats the prompt while y still holds both of its full blocks.
  h.add_request("w", prompt, tokens(1));
  const ExpectedStep repeat[] = {{"y:10+1* w:8+1*", 5}};  // w took one block of its own
  expect_steps(h, repeat, 3);
  const sched::SchedulerSnapshot s = h.scheduler().snapshot();
  EXPECT_EQ(s.prefix_cache_hits, 8);
  EXPECT_EQ(s.prefix_cache_queries, 9 + 9 + 16 + 9);
  ASSERT_NE(h.finished("w"), nullptr);
  EXPECT_EQ(h.finished("w")->usage.cached_tokens, 8);
  h.run_to_end();
  EXPECT_EQ(h.free_blocks(), 8);
}

}  // namespace
}  // namespace optimate::testing
