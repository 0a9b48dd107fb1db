// `optimate advise`: the traits it reads from a workload, the candidates the decision guide
// gives, the recommendation, and a recorded trace (optimate serve --record-trace) read back as
// the same workload.
#include <gtest/gtest.h>

#include <filesystem>

#include "bench/advise.h"
#include "bench/trace.h"
#include "core/error.h"
#include "engine/trace_recorder.h"

namespace optimate::bench {
namespace {

const std::string kProfile =
    std::string(OPTIMATE_TEST_DATA_DIR) + "/../../profiles/h200-llama3-8b-calibrated.json";

WorkloadSpec mixed(double rate, std::vector<PriorityClass> classes, ArrivalKind kind = ArrivalKind::kPoisson) {
  WorkloadSpec spec;
  spec.name = "advise";
  spec.seed = 11;
  spec.num_requests = 300;
  spec.arrival.kind = kind;
  spec.arrival.rate_per_s = rate;
  spec.arrival.on_s = 5;
  spec.arrival.off_s = 15;
  spec.arrival.on_rate_per_s = rate * 3;
  spec.arrival.off_rate_per_s = rate / 3;
  spec.prompt = {.kind = LengthKind::kUniform, .min = 64, .max = 512};
  spec.output = {.kind = LengthKind::kUniform, .min = 16, .max = 128};
  spec.priorities = std::move(classes);
  spec.token_id_max = 4000;
  return spec;
}

TEST(Advise, ParsesTheSloAndNamesWhatIsWrong) {
  const SloTargets slo = parse_slo("ttft_p99_ms=500,tpot_p99_ms=40");
  EXPECT_EQ(slo.ttft_p99_ms, 500);
  EXPECT_EQ(slo.tpot_p99_ms, 40);
  EXPECT_FALSE(parse_slo("").any());
  for (const char* bad : {"ttft=5", "ttft_p99_ms", "ttft_p99_ms=fast", "tpot_p99_ms=-1", "ttft_p99_ms=5ms"}) {
    try {
      parse_slo(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--slo"), std::string::npos) << e.what();
    }
  }
}

TEST(Advise, ReadsTheDecisionGuidesQuestionsFromTheTraffic) {
  const WorkloadTraits poisson = workload_traits(build_workload(mixed(10, {})));
  EXPECT_NEAR(poisson.arrival_cv, 1.0, 0.15);
  EXPECT_TRUE(poisson.regular());
  EXPECT_EQ(poisson.priorities.size(), 1u);
  EXPECT_NEAR(poisson.mean_rate_per_s, 10, 1.5);

  const WorkloadTraits bursty = workload_traits(build_workload(mixed(10, {{"hi", 2, 1}, {"lo", 1, 3}}, ArrivalKind::kBurst)));
  EXPECT_GT(bursty.arrival_cv, 1.5);
  EXPECT_FALSE(bursty.regular());
  EXPECT_EQ(bursty.priorities, (std::vector<int64_t>{2, 1}));

  WorkloadSpec offline = mixed(10, {});
  offline.arrival.kind = ArrivalKind::kOffline;
  EXPECT_TRUE(workload_traits(build_workload(offline)).offline);
}

TEST(Advise, CandidatesFollowTheGuide) {
  const SloTargets slo = parse_slo("ttft_p99_ms=500");
  auto labels = [&](const WorkloadTraits& t) {
    std::vector<std::string> out;
    for (const Candidate& c : guide_candidates(t, slo, EngineConfig{})) out.push_back(c.label);
    return out;
  };
  WorkloadTraits t;
  t.priorities = {3, 1};
  t.arrival_cv = 1.0;
  const auto interactive = labels(t);
  EXPECT_NE(std::find(interactive.begin(), interactive.end(), "priority"), interactive.end());
  EXPECT_NE(std::find(interactive.begin(), interactive.end(), "predictive max_wait_ms=20"), interactive.end());
  EXPECT_NE(std::find(interactive.begin(), interactive.end(), "adaptive + priority"), interactive.end());
  t.priorities = {0};
  t.arrival_cv = 3.0;  // bursty: no predictive batching, one class: no priority
  for (const std::string& l : labels(t)) {
    EXPECT_EQ(l.find("predictive"), std::string::npos) << l;
    EXPECT_EQ(l.find("priority"), std::string::npos) << l;
  }
}

TEST(Advise, RecommendsAConfigurationThatMeetsTheSloAndWritesItAsToml) {
  const Workload w = build_workload(mixed(20, {{"high", 3, 1}, {"low", 1, 4}}, ArrivalKind::kBurst));
  EngineConfig base;
  base.max_num_seqs = 16;  // a static limit the bursts outgrow
  const SloTargets slo = parse_slo("ttft_p99_ms=1000");
  const Advice advice = advise(w, load_cost_profile(kProfile), slo, base);
  ASSERT_GE(advice.rows.size(), 5u);
  EXPECT_EQ(advice.rows[0].candidate.label, "default");
  EXPECT_FALSE(advice.rows[0].meets_slo);  // the default misses it: advice is needed
  const AdviceRow& chosen = advice.rows[advice.recommended];
  EXPECT_TRUE(chosen.meets_slo) << advice_markdown(advice);
  // Nothing that meets the SLO has clearly more throughput.
  for (const AdviceRow& r : advice.rows)
    if (r.meets_slo) EXPECT_LE(r.summary.output_throughput, chosen.summary.output_throughput * 1.01);
  const std::string table = advice_markdown(advice);
  EXPECT_NE(table.find("(recommended)"), std::string::npos);
  EXPECT_NE(table.find("2 priority classes"), std::string::npos);
  // The TOML is a configuration the engine takes.
  const std::string toml = recommended_toml(advice);
  const EngineConfig parsed = parse_engine_config_toml(toml, "advice.toml");
  EXPECT_EQ(parsed.max_num_seqs, chosen.candidate.config.max_num_seqs);
  EXPECT_EQ(parsed.optimizers.size(), chosen.candidate.config.optimizers.size());
}

TEST(RecordedTrace, ReadsBackAsTheSameArrivalsLengthsAndPriorities) {
  const std::string path = ::testing::TempDir() + "/recorded-trace.jsonl";
  {
    auto recorder = TraceRecorder::open_file(path);
    recorder->record(5'000'000'000, 120, 64, 2);
    recorder->record(5'250'000'000, 7, 1, 0);
    recorder->record(6'000'000'000, 900, 300, -1);
  }
  const std::vector<TraceRecord> records = load_trace({path, TraceFormat::kPlain}, 0);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_DOUBLE_EQ(*records[0].arrival_s, 0.0);
  EXPECT_DOUBLE_EQ(*records[1].arrival_s, 0.25);
  EXPECT_EQ(*records[2].prompt_len, 900);
  EXPECT_EQ(*records[2].max_tokens, 300);
  EXPECT_EQ(*records[2].priority, -1);
  EXPECT_TRUE(records[0].prompt_text.empty());  // no text is ever recorded

  WorkloadSpec spec;
  spec.num_requests = 0;
  spec.arrival.kind = ArrivalKind::kTrace;
  spec.trace = TraceSpec{path, TraceFormat::kPlain};
  const Workload w = build_workload(spec);
  ASSERT_EQ(w.requests.size(), 3u);
  EXPECT_EQ(w.requests[1].prompt_len, 7);
  EXPECT_DOUBLE_EQ(w.requests[2].arrival_s, 1.0);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace optimate::bench
