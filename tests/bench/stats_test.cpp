// Percentiles and run metrics match numpy and vllm bench's formulas
// (fixture: tests/scripts/make_bench_fixtures.py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "bench/stats.h"
#include "bench/summary.h"

namespace optimate::bench {
namespace {

nlohmann::json fixture() {
  std::ifstream in(std::string(OPTIMATE_TEST_DATA_DIR) + "/bench/stats.json");
  return nlohmann::json::parse(in);
}

void expect_close(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 1e-9 * std::max(1.0, std::abs(want))) << what;
}

TEST(Percentile, MatchesNumpyLinearInterpolation) {
  for (const auto& c : fixture()["cases"]) {
    const auto values = c["values"].get<std::vector<double>>();
    for (const auto& [p, want] : c["percentiles"].items())
      expect_close(percentile(values, std::stod(p)), want.get<double>(),
                   c["name"].get<std::string>() + " p" + p);
    const SampleStats s = sample_stats(values);
    expect_close(s.mean, c["mean"], "mean");
    expect_close(s.std, c["std"], "std");
    expect_close(s.median, c["median"], "median");
  }
}

TEST(Percentile, EmptySampleIsNotANumber) {
  EXPECT_TRUE(std::isnan(percentile(std::vector<double>{}, 50)));
  EXPECT_TRUE(std::isnan(sample_stats(std::vector<double>{}).p99));
  EXPECT_EQ(sample_stats(std::vector<double>{}).count, 0);
}

TEST(Summary, MatchesVllmBenchFormulas) {
  const auto run_json = fixture()["run"];
  RunResult run;
  for (const auto& r : run_json["requests"]) {
    RequestRecord rec;
    rec.arrival_s = r["arrival_s"];
    rec.token_times_s = r["token_times_s"].get<std::vector<double>>();
    rec.first_token_s = rec.token_times_s.front();
    rec.finish_s = rec.token_times_s.back();
    rec.output_tokens = r["output_tokens"];
    rec.prompt_tokens = r["prompt_tokens"];
    rec.success = r["success"];
    run.records.push_back(rec);
  }
  const RunSummary s = summarize(run);
  const auto& e = run_json["expected"];
  EXPECT_EQ(s.completed, e["completed"].get<int64_t>());
  EXPECT_EQ(s.failed, e["failed"].get<int64_t>());
  expect_close(s.duration_s, e["duration_s"], "duration");
  expect_close(s.request_throughput, e["request_throughput"], "request throughput");
  expect_close(s.output_throughput, e["output_throughput"], "output throughput");
  expect_close(s.total_token_throughput, e["total_token_throughput"], "total throughput");
  const std::pair<const char*, const SampleStats*> metrics[] = {
      {"ttft_ms", &s.ttft_ms}, {"tpot_ms", &s.tpot_ms}, {"itl_ms", &s.itl_ms}, {"e2el_ms", &s.e2el_ms}};
  for (const auto& [name, stats] : metrics) {
    const auto& want = e[name];
    expect_close(stats->mean, want["mean"], std::string(name) + " mean");
    expect_close(stats->median, want["median"], std::string(name) + " median");
    expect_close(stats->std, want["std"], std::string(name) + " std");
    expect_close(stats->p95, want["p95"], std::string(name) + " p95");
    expect_close(stats->p99, want["p99"], std::string(name) + " p99");
  }
}

TEST(Summary, BreaksDownByPriorityMostImportantFirst) {
  RunResult run;
  auto add = [&](int64_t prio, const char* name, double arrival, double sched, double first) {
    RequestRecord r;
    r.priority = prio;
    r.priority_class = name;
    r.arrival_s = arrival;
    r.scheduled_s = sched;
    r.first_token_s = first;
    r.finish_s = first + 0.1;
    r.token_times_s = {first, first + 0.1};
    r.output_tokens = 2;
    r.success = true;
    run.records.push_back(r);
  };
  add(1, "low", 0.0, 0.5, 0.6);
  add(3, "high", 0.0, 0.0, 0.1);
  add(1, "low", 0.1, 1.1, 1.2);
  const RunSummary s = summarize(run);
  ASSERT_EQ(s.classes.size(), 2u);
  EXPECT_EQ(s.classes[0].name, "high");
  EXPECT_EQ(s.classes[1].name, "low");
  EXPECT_EQ(s.classes[1].completed, 2);
  EXPECT_NEAR(s.classes[1].queue_ms.max, 1000.0, 1e-9);
  EXPECT_NEAR(s.classes[0].ttft_ms.mean, 100.0, 1e-9);
}

}  // namespace
}  // namespace optimate::bench
