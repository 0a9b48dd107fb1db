// The kv_quant policy over hand-made views: new blocks are always full precision, written
// blocks are requantized only outside the first and newest tokens' windows, the important
// class is protected from the longer steps a bigger batch of the others would cost, and the
// quality estimate weighs each precision's measured cost by its blocks.
#include <gtest/gtest.h>

#include "core/error.h"
#include "optim/kv_quant_policy.h"

namespace optimate::optim {
namespace {

using kv::KvPrecision;

KvQuantOptions options() {
  KvQuantOptions o;
  o.precision = KvPrecision::kInt4;
  o.activation_threshold = 0.0;
  o.deactivation_threshold = 0.0;
  o.keep_first_tokens = 20;
  o.keep_recent_tokens = 40;
  return o;
}

RequestView request(int64_t seq, int64_t priority, int64_t computed, int64_t num_full_blocks) {
  RequestView r;
  r.seq_id = seq;
  r.metadata.priority = EnginePriority{priority};
  r.num_computed_tokens = computed;
  r.num_blocks = (computed + 15) / 16;
  r.num_full_blocks = num_full_blocks;
  r.arrival_ns = seq;
  return r;
}

SchedulerView view(const std::vector<RequestView>& running, const std::vector<RequestView>& waiting = {}) {
  SchedulerView v;
  v.running = running;
  v.waiting = waiting;
  v.kv.block_size = 16;
  v.kv.num_blocks = 100;
  v.kv.num_free_blocks = 50;
  v.kv.default_precision = KvPrecision::kBF16;
  v.kv.finest_precision = KvPrecision::kInt4;
  return v;
}

TEST(KvQuantPolicy, NewBlocksAreFullPrecisionAndAStaticCacheIsRefused) {
  KvQuantPolicy policy(options());
  const std::vector<RequestView> running = {request(1, 0, 200, 13)};
  SchedulerView v = view(running);
  EXPECT_EQ(policy.precision_for(v, v.running[0]), KvPrecision::kBF16);
  v.kv.finest_precision.reset();
  try {
    policy.precision_for(v, v.running[0]);
    ADD_FAILURE() << "a cache of one precision was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("restart"), std::string::npos) << e.what();
  }
}

TEST(KvQuantPolicy, RequantizesOnlyBlocksOutsideBothWindows) {
  KvQuantPolicy policy(options());
  // 200 tokens in 13 blocks, all full precision: blocks 0 and 1 hold the first 20 tokens,
  // blocks from (200 - 40) / 16 = 10 on hold the newest 40.
  const std::vector<RequestView> running = {request(1, 0, 200, 13)};
  const std::vector<RequantizeOrder> orders = policy.requantize(view(running));
  ASSERT_EQ(orders.size(), 1u);
  EXPECT_EQ(orders[0].first_block, 2);
  EXPECT_EQ(orders[0].first_block + orders[0].num_blocks, 10);
  EXPECT_EQ(orders[0].max_blocks, 8);
  EXPECT_EQ(orders[0].precision, KvPrecision::kInt4);
  // Once those 8 are quantized (5 full blocks left, all in the windows), nothing more is asked.
  EXPECT_TRUE(policy.requantize(view({request(1, 0, 200, 5)})).empty());
  // A sequence shorter than both windows keeps everything.
  EXPECT_TRUE(policy.requantize(view({request(2, 0, 60, 4)})).empty());
}

TEST(KvQuantPolicy, WhileImportantRequestsRunOnlyTheirNeedFreesRoom) {
  KvQuantPolicy policy(options());
  const RequestView low = request(1, 0, 400, 25);
  const RequestView high = request(2, 1, 400, 25);
  // An important request runs, only others wait: nothing is requantized, so the batch of the
  // others does not grow past what full precision holds.
  EXPECT_TRUE(policy.requantize(view({low, high}, {request(3, 0, 0, 0)})).empty());
  // An important request waits: the low request's blocks make room for it.
  std::vector<RequantizeOrder> orders = policy.requantize(view({low, high}, {request(4, 1, 0, 0)}));
  ASSERT_EQ(orders.size(), 1u);
  EXPECT_EQ(orders[0].seq_id, 1);
  // The running sequences' next blocks would not fit: room is made whoever waits.
  const std::vector<RequestView> both = {low, high};
  SchedulerView tight = view(both);
  tight.kv.num_free_blocks = 1;
  EXPECT_EQ(policy.requantize(tight).size(), 1u);
  // No important request runs: room for anyone.
  EXPECT_EQ(policy.requantize(view({low}, {request(5, 0, 0, 0)})).size(), 1u);
  double held = -1;
  for (const PolicyCounter& c : policy.counters())
    if (c.name == "held_for_priority") held = c.value;
  EXPECT_EQ(held, 1.0);
  // Without protect_priority the first case requantizes too.
  KvQuantOptions o = options();
  o.protect_priority = false;
  KvQuantPolicy unprotected(o);
  EXPECT_EQ(unprotected.requantize(view({low, high}, {request(3, 0, 0, 0)})).size(), 1u);
}

TEST(KvQuantPolicy, WhileImportantRequestsRunOrWaitTheOthersAdmissionIsLimitedToFullPrecision) {
  KvQuantPolicy policy(options());
  const RequestView low = request(1, 0, 400, 25);
  const RequestView high = request(2, 1, 400, 25);
  // Important requests running or waiting: the others may fill what the cache holds at full
  // precision (100 blocks), the important class is not limited.
  for (const SchedulerView& v : {view({low, high}, {request(3, 0, 0, 0)}), view({low}, {request(4, 1, 0, 0)})}) {
    const std::optional<KvPolicy::Footprint> f = policy.admission_footprint(v);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->max_blocks, 100);
    EXPECT_EQ(f->min_priority, EnginePriority{1});
  }
  // None in sight, or protection off, or a cache of one precision: no limit.
  EXPECT_FALSE(policy.admission_footprint(view({low}, {request(5, 0, 0, 0)})).has_value());
  // Nor while the policy is off and no block is quantized: the batch is full precision's already.
  KvQuantOptions idle_options = options();
  idle_options.activation_threshold = 0.9;
  KvQuantPolicy idle(idle_options);
  SchedulerView quiet = view({low, high});
  EXPECT_FALSE(idle.admission_footprint(quiet).has_value());
  quiet.kv.used_blocks_by_code[2] = 3;  // int8 blocks left from an earlier peak
  EXPECT_TRUE(idle.admission_footprint(quiet).has_value());
  SchedulerView uniform = view({low, high});
  uniform.kv.finest_precision.reset();
  EXPECT_FALSE(policy.admission_footprint(uniform).has_value());
  KvQuantOptions o = options();
  o.protect_priority = false;
  KvQuantPolicy unprotected(o);
  EXPECT_FALSE(unprotected.admission_footprint(view({low, high})).has_value());
}

TEST(KvQuantPolicy, QualityEstimateWeighsEachPrecisionByItsBlocks) {
  KvQuantOptions o = options();
  o.quality_int8 = 0.002;
  o.quality_int4 = 0.03;
  KvQuantPolicy policy(o);
  KvView kv;
  EXPECT_EQ(policy.quality_estimate(kv), 0.0);
  kv.used_blocks_by_code = {50, 0, 25, 25};  // half full precision, a quarter each int8 and int4
  EXPECT_DOUBLE_EQ(policy.quality_estimate(kv), 0.25 * 0.002 + 0.25 * 0.03);
  kv.used_blocks_by_code = {0, 0, 0, 10};
  EXPECT_DOUBLE_EQ(policy.quality_estimate(kv), 0.03);
  // The counter follows the view the last requantize pass saw.
  const std::vector<RequestView> one = {request(1, 0, 200, 5)};
  SchedulerView v = view(one);
  v.kv.used_blocks_by_code = {5, 0, 0, 8};
  policy.requantize(v);
  double estimate = -1;
  for (const PolicyCounter& c : policy.counters())
    if (c.name == "quality_estimate") estimate = c.value;
  EXPECT_DOUBLE_EQ(estimate, 0.03 * 8 / 13);
}

}  // namespace
}  // namespace optimate::optim
