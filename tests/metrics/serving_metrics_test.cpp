// The names, labels and buckets that vLLM-aware routers and dashboards read.
#include <gtest/gtest.h>

#include <climits>
#include <regex>
#include <set>
#include <sstream>

#include "metrics/serving_metrics.h"

namespace optimate::metrics {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l == line) return true;
  return false;
}

std::vector<std::string> bucket_bounds(const std::string& text, const std::string& name) {
  std::vector<std::string> out;
  std::regex re(name + R"(_bucket\{le="([^"]+)\",model_name="m"\} )");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it)
    out.push_back((*it)[1]);
  return out;
}

TEST(ServingMetrics, ExportsTheVllmNamesRoutersRead) {
  Registry r;
  ServingMetrics m(r, "m", 2048);
  std::string text = r.render();
  for (const char* type_line :
       {"# TYPE vllm:num_requests_running gauge", "# TYPE vllm:num_requests_waiting gauge",
        "# TYPE vllm:kv_cache_usage_perc gauge", "# TYPE vllm:gpu_cache_usage_perc gauge",
        "# TYPE vllm:num_preemptions_total counter", "# TYPE vllm:prompt_tokens_total counter",
        "# TYPE vllm:generation_tokens_total counter",
        "# TYPE vllm:request_success_total counter",
        "# TYPE vllm:prefix_cache_queries_total counter",
        "# TYPE vllm:prefix_cache_hits_total counter",
        "# TYPE vllm:time_to_first_token_seconds histogram",
        "# TYPE vllm:inter_token_latency_seconds histogram",
        "# TYPE vllm:e2e_request_latency_seconds histogram",
        "# TYPE vllm:request_queue_time_seconds histogram"})
    EXPECT_TRUE(has_line(text, type_line)) << type_line;
  EXPECT_TRUE(has_line(text, R"(vllm:num_requests_running{model_name="m"} 0.0)"));
  EXPECT_TRUE(has_line(text, R"(vllm:request_success_total{finished_reason="abort",model_name="m"} 0.0)"));
}

TEST(ServingMetrics, TtftBucketsAreVllms) {
  Registry r;
  ServingMetrics m(r, "m", 2048);
  // REFERENCE.md's list, as vLLM's Python client writes the bounds.
  std::vector<std::string> expected = {"0.001", "0.005", "0.01", "0.02",  "0.04",  "0.06",
                                       "0.08",  "0.1",   "0.25", "0.5",   "0.75",  "1.0",
                                       "2.5",   "5.0",   "7.5",  "10.0",  "20.0",  "40.0",
                                       "80.0",  "160.0", "640.0", "2560.0", "+Inf"};
  EXPECT_EQ(bucket_bounds(r.render(), "vllm:time_to_first_token_seconds"), expected);
}

TEST(ServingMetrics, SchedulerStateAndFinishedRequests) {
  Registry r;
  ServingMetrics m(r, "m", 2048);
  SchedulerGauges s;
  s.num_running = 3;
  s.num_waiting = 2;
  s.num_waiting_by_priority = {{EnginePriority{0}, 1}, {EnginePriority{10}, 1}, {EnginePriority{11}, 2}};
  s.kv_used_blocks = 25;
  s.kv_total_blocks = 100;
  s.kv_blocks_by_precision = {{"bf16", 20}, {"int8", 5}};
  m.set_scheduler_state(s);
  std::string text = r.render();
  EXPECT_TRUE(has_line(text, R"(vllm:num_requests_running{model_name="m"} 3.0)"));
  EXPECT_TRUE(has_line(text, R"(vllm:kv_cache_usage_perc{model_name="m"} 0.25)"));
  EXPECT_TRUE(has_line(text, R"(vllm:gpu_cache_usage_perc{model_name="m"} 0.25)"));
  EXPECT_TRUE(has_line(text, R"(optimate:num_requests_waiting_by_priority{model_name="m",priority="0"} 1.0)"));
  // Priorities outside the fixed set share one series.
  EXPECT_TRUE(has_line(text, R"(optimate:num_requests_waiting_by_priority{model_name="m",priority="other"} 3.0)"));
  EXPECT_TRUE(has_line(text, R"(optimate:kv_cache_blocks{model_name="m",precision="int8"} 5.0)"));

  // A priority level that empties drops to 0 instead of disappearing.
  m.set_scheduler_state(SchedulerGauges{});
  text = r.render();
  EXPECT_TRUE(has_line(text, R"(optimate:num_requests_waiting_by_priority{model_name="m",priority="other"} 0.0)"));
  EXPECT_TRUE(has_line(text, R"(optimate:kv_cache_used_blocks{model_name="m"} 0.0)"));

  FinishedRequestStats f;
  f.finish_reason = "length";
  f.priority = EnginePriority{2};
  f.num_prompt_tokens = 7;
  f.num_generation_tokens = 16;
  f.max_tokens = 16;
  f.queue_s = 0.2;
  f.e2e_s = 1.2;
  m.record_finished(f);
  m.record_first_token(0.03);
  text = r.render();
  EXPECT_TRUE(has_line(text, R"(vllm:request_success_total{finished_reason="length",model_name="m"} 1.0)"));
  EXPECT_TRUE(has_line(text, R"(vllm:e2e_request_latency_seconds_count{model_name="m"} 1.0)"));
  EXPECT_TRUE(has_line(text, R"(vllm:time_to_first_token_seconds_bucket{le="0.04",model_name="m"} 1.0)"));
  EXPECT_TRUE(has_line(text, R"(vllm:time_to_first_token_seconds_bucket{le="0.02",model_name="m"} 0.0)"));
  EXPECT_TRUE(has_line(text, R"(optimate:request_queue_time_by_priority_seconds_count{model_name="m",priority="2"} 1.0)"));
  // Phases that never happened are not observed.
  EXPECT_TRUE(has_line(text, R"(vllm:request_prefill_time_seconds_count{model_name="m"} 0.0)"));
}

size_t count_lines_starting(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  size_t n = 0;
  for (std::string l; std::getline(in, l);) n += l.rfind(prefix, 0) == 0;
  return n;
}

TEST(ServingMetrics, ClientPrioritiesCannotGrowTheSeriesCount) {
  Registry r;
  ServingMetrics m(r, "m", 2048);
  for (int64_t p = -5000; p < 5000; p += 7) {
    FinishedRequestStats f;
    f.finish_reason = "length";
    f.priority = EnginePriority{p * 1000003};
    f.queue_s = 0.01;
    m.record_finished(f);
    SchedulerGauges s;
    s.num_waiting_by_priority = {{EnginePriority{p}, 1}};
    m.set_scheduler_state(s);
  }
  const std::string text = r.render();
  // -2..2 and "other": six series at most, whatever 1,429 clients sent.
  EXPECT_LE(count_lines_starting(text, "optimate:num_requests_waiting_by_priority{"), 6u);
  EXPECT_LE(count_lines_starting(text, "optimate:request_queue_time_by_priority_seconds_count{"), 6u);
}

TEST(ServingMetrics, PriorityLevelNamesFromTheOperatorsRule) {
  Registry r;
  ServingMetrics m(r, "m", 2048);
  m.set_priority_labeler([](EnginePriority p) { return p.value >= 5 ? std::string("high") : std::string("low"); });
  SchedulerGauges s;
  s.num_waiting_by_priority = {{EnginePriority{-40}, 1}, {EnginePriority{0}, 2}, {EnginePriority{9}, 4}};
  m.set_scheduler_state(s);
  const std::string text = r.render();
  EXPECT_TRUE(has_line(text, R"(optimate:num_requests_waiting_by_priority{model_name="m",priority="low"} 3.0)"));
  EXPECT_TRUE(has_line(text, R"(optimate:num_requests_waiting_by_priority{model_name="m",priority="high"} 4.0)"));
}

TEST(PriorityLabels, CapTheDistinctValuesWhateverTheRule) {
  PriorityLabels labels;
  labels.set_labeler([](EnginePriority p) { return std::to_string(p.value); });  // bounds nothing
  std::set<std::string> seen;
  for (int64_t p = 0; p < 1000; ++p) seen.insert(labels.label(EnginePriority{p}));
  EXPECT_EQ(seen.size(), PriorityLabels::kMaxLabels);
  EXPECT_TRUE(seen.count(kOtherPriorityLabel));
  EXPECT_EQ(labels.label(EnginePriority{3}), "3");  // values already handed out stay as they were
}

TEST(PriorityLabels, FixedSetKeepsSmallNumbers) {
  EXPECT_EQ(fixed_priority_label(ClientPriority{0}), "0");
  EXPECT_EQ(fixed_priority_label(ClientPriority{-2}), "-2");
  EXPECT_EQ(fixed_priority_label(ClientPriority{3}), "other");
  EXPECT_EQ(fixed_priority_label(ClientPriority{INT64_MIN}), "other");
}

TEST(ServingMetrics, UnknownFinishReasonsShareOneSeries) {
  Registry r;
  ServingMetrics m(r, "m", 2048);
  FinishedRequestStats f;
  f.finish_reason = "something new";
  m.record_finished(f);
  EXPECT_TRUE(has_line(r.render(), R"(vllm:request_success_total{finished_reason="other",model_name="m"} 1.0)"));
}

}  // namespace
}  // namespace optimate::metrics
