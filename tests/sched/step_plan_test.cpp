// What the scheduler hands the samplers and its observers: each sampled row's data (the
// sequence's seed, how many tokens it generated, the ids it may not draw yet, its token
// history only when a penalty needs it), and the figures of Scheduler::snapshot().
#include <gtest/gtest.h>

#include "optim/sched_harness.h"

namespace optimate::testing {
namespace {

sched::SchedulerConfig config(int64_t max_num_seqs, int64_t max_num_batched_tokens) {
  sched::SchedulerConfig c = small_config(max_num_seqs, max_num_batched_tokens, 16, 32);
  c.eos_token_ids = {0, 2};
  return c;
}

// One sampled row as a step plan carries it.
struct Row {
  int64_t step;
  int64_t index;         // which of the request's samples
  uint64_t seed;
  int64_t output_index;
  std::vector<int32_t> suppressed_ids;
  bool history;          // prompt and output ids present
  bool operator==(const Row&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Row& r) {
  os << "{step " << r.step << ", sample " << r.index << ", seed " << r.seed << ", output "
     << r.output_index << ", suppressed [";
  for (int32_t id : r.suppressed_ids) os << id << " ";
  return os << "], history " << r.history << "}";
}

struct RowCase {
  const char* name;
  SamplingParams params;  // max_tokens 3 unless set
  uint64_t seed;
  std::vector<Row> rows;
};

SamplingParams with(void (*edit)(SamplingParams&)) {
  SamplingParams p;
  p.max_tokens = 3;
  edit(p);
  return p;
}

const RowCase kRowCases[] = {
    {"min_tokens suppresses EOS ids, then the stop ids, until reached",
     with([](SamplingParams& p) { p.min_tokens = 2; p.stop_token_ids = {9}; }), 40,
     {{1, 0, 40, 0, {0, 2, 9}, false}, {2, 0, 40, 1, {0, 2, 9}, false},
      {3, 0, 40, 2, {}, false}}},
    {"ignore_eos leaves only the stop ids to suppress",
     with([](SamplingParams& p) {
       p.min_tokens = 1;
       p.ignore_eos = true;
       p.stop_token_ids = {9};
     }),
     0, {{1, 0, 0, 0, {9}, false}, {2, 0, 0, 1, {}, false}, {3, 0, 0, 2, {}, false}}},
    {"n = 2: each sample has its own seed and output count",
     with([](SamplingParams& p) { p.n = 2; }), 7,
     {{1, 0, 7, 0, {}, false}, {2, 0, 7, 1, {}, false}, {2, 1, 8, 0, {}, false},
      {3, 0, 7, 2, {}, false}, {3, 1, 8, 1, {}, false}, {4, 1, 8, 2, {}, false}}},
    {"repetition penalty: the row carries the history",
     with([](SamplingParams& p) { p.repetition_penalty = 1.2f; }), 0,
     {{1, 0, 0, 0, {}, true}, {2, 0, 0, 1, {}, true}, {3, 0, 0, 2, {}, true}}},
    {"presence penalty: the row carries the history",
     with([](SamplingParams& p) { p.presence_penalty = 0.5f; }), 0,
     {{1, 0, 0, 0, {}, true}, {2, 0, 0, 1, {}, true}, {3, 0, 0, 2, {}, true}}},
    {"no penalty: no history", with([](SamplingParams& p) { p.temperature = 0.0f; }), 0,
     {{1, 0, 0, 0, {}, false}, {2, 0, 0, 1, {}, false}, {3, 0, 0, 2, {}, false}}},
};

TEST(StepPlan, SampledRowsCarryWhatTheSamplerNeeds) {
  const std::vector<int32_t> prompt = {11, 12, 13};
  for (const RowCase& c : kRowCases) {
    SCOPED_TRACE(c.name);
    SchedHarness h(config(4, 64), {}, 1);
    h.set_token_source(counting_token);
    auto params = std::make_shared<SamplingParams>(c.params);
    h.add_request("r", prompt, params, 0, std::nullopt, c.seed);
    std::map<sched::SeqId, int64_t> index_of;  // finished sequences leave the scheduler
    for (int64_t i = 0; i < params->n; ++i) index_of[h.request("r", i)->seq_id] = i;
    std::vector<Row> rows;
    for (int64_t step = 1; h.scheduler().has_unfinished() && step < 10; ++step) {
      for (const auto& s : h.step().seqs) {
        ASSERT_TRUE(s.want_logits);
        EXPECT_EQ(s.sample.params, params);
        rows.push_back({step, index_of.at(s.seq_id), s.sample.seed, s.sample.output_index,
                        s.sample.suppressed_ids, !s.sample.prompt_ids.empty()});
        if (rows.back().history) {
          EXPECT_EQ(s.sample.prompt_ids, prompt);
          EXPECT_EQ(s.sample.output_ids, counted(s.sample.output_index));
        } else {
          EXPECT_TRUE(s.sample.output_ids.empty());
        }
      }
    }
    EXPECT_EQ(rows, c.rows);
  }
}

TEST(StepPlan, OnlyTheChunkThatReachesTheEndSamples) {
  SchedHarness h(config(4, 4), {}, 1);
  auto params = std::make_shared<SamplingParams>();
  params->min_tokens = 1;
  h.add_request("r", std::vector<int32_t>(10, 5), params, 0, std::nullopt, 3);
  for (int64_t start : {0, 4}) {
    const sched::StepPlan plan = h.step();
    ASSERT_EQ(plan.seqs.size(), 1u);
    EXPECT_EQ(plan.seqs[0].start_pos, start);
    EXPECT_FALSE(plan.seqs[0].want_logits);
    EXPECT_EQ(plan.seqs[0].sample.params, nullptr);
    EXPECT_TRUE(plan.seqs[0].sample.suppressed_ids.empty());
  }
  const sched::StepPlan last = h.step();
  ASSERT_EQ(last.seqs.size(), 1u);
  EXPECT_TRUE(last.seqs[0].want_logits);
  EXPECT_EQ(last.seqs[0].sample.seed, 3u);
  EXPECT_EQ(last.seqs[0].sample.output_index, 0);
  EXPECT_EQ(last.seqs[0].sample.suppressed_ids, (std::vector<int32_t>{0, 2}));
}

struct Figures {
  const char* plan;  // the step before (empty: none yet)
  int64_t num_running, num_waiting;
  std::map<EnginePriority, int64_t> waiting_by_priority;
  int64_t kv_used_blocks;
  std::map<std::string, int64_t> blocks_by_precision;
  int64_t num_steps, num_prompt_tokens, num_generation_tokens;
  int64_t prefix_queries, prefix_hits;
};

TEST(StepPlan, SnapshotFigures) {
  // One sequence at a time; b repeats a's prompt and finds its first block in the cache.
  sched::SchedulerConfig c = config(1, 8);
  c.kv_layout = kv::KvLayout::of(kv::KvPrecision::kBF16);
  SchedHarness h(c, {}, 1);
  h.add_request("a", {1, 2, 3, 4, 5, 6}, tokens(2), 0);
  h.add_request("b", {1, 2, 3, 4, 5, 6}, tokens(2), 1);
  h.add_request("c", {40, 41, 42}, tokens(2), 1);
  const Figures expected[] = {
      {"", 0, 3, {{{0}, 1}, {{1}, 2}}, 0, {}, 0, 0, 0, 0, 0},
      {"a:0+6*", 1, 2, {{{1}, 2}}, 2, {{"bf16", 2}}, 1, 6, 1, 6, 0},
      {"a:6+1*", 0, 2, {{{1}, 2}}, 0, {}, 2, 6, 2, 6, 0},
      {"b:4+2*", 1, 1, {{{1}, 1}}, 2, {{"bf16", 2}}, 3, 8, 3, 12, 4},
      {"b:6+1*", 0, 1, {{{1}, 1}}, 0, {}, 4, 8, 4, 12, 4},
      {"c:0+3*", 1, 0, {}, 1, {{"bf16", 1}}, 5, 11, 5, 15, 4},
      {"c:3+1*", 0, 0, {}, 0, {}, 6, 11, 6, 15, 4},
  };
  for (const Figures& f : expected) {
    if (*f.plan) {
      h.step();
      EXPECT_EQ(h.described(), f.plan);
    }
    SCOPED_TRACE(std::string("after ") + f.plan);
    const sched::SchedulerSnapshot s = h.scheduler().snapshot();
    EXPECT_EQ(s.num_running, f.num_running);
    EXPECT_EQ(s.num_waiting, f.num_waiting);
    EXPECT_EQ(s.num_waiting_by_priority, f.waiting_by_priority);
    EXPECT_EQ(s.kv_total_blocks, 16);
    EXPECT_EQ(s.kv_used_blocks, f.kv_used_blocks);
    EXPECT_EQ(s.kv_blocks_by_precision, f.blocks_by_precision);
    EXPECT_EQ(s.num_steps, f.num_steps);
    EXPECT_EQ(s.num_preemptions, 0);
    EXPECT_EQ(s.num_prompt_tokens, f.num_prompt_tokens);
    EXPECT_EQ(s.num_generation_tokens, f.num_generation_tokens);
    EXPECT_EQ(s.prefix_cache_queries, f.prefix_queries);
    EXPECT_EQ(s.prefix_cache_hits, f.prefix_hits);
  }
  EXPECT_FALSE(h.scheduler().has_unfinished());
}

}  // namespace
}  // namespace optimate::testing
