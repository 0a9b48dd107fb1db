// `optimate advise`: the traits it reads from a workload, the candidates the decision guide
// gives, the recommendation, and a recorded trace (optimate serve --record-trace) read back as
// the same workload.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "bench/advise.h"
#include "bench/trace.h"
#include "bench/workload_toml.h"
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
  // The hold is the measured knee's low end for interactive traffic, its high end for batch work.
  EXPECT_NE(std::find(interactive.begin(), interactive.end(), "predictive max_wait_ms=10"), interactive.end());
  EXPECT_NE(std::find(interactive.begin(), interactive.end(), "adaptive + priority"), interactive.end());
  EXPECT_NE(std::find(interactive.begin(), interactive.end(), "adaptive"), interactive.end());
  std::vector<std::string> batch;
  for (const Candidate& c : guide_candidates(t, SloTargets{}, EngineConfig{})) batch.push_back(c.label);
  EXPECT_NE(std::find(batch.begin(), batch.end(), "predictive max_wait_ms=30"), batch.end());
  // A device the default run kept busy has no idle time for a hold to fill.
  WorkloadTraits busy = t;
  busy.busy_fraction = 0.99;
  for (const Candidate& c : guide_candidates(busy, slo, EngineConfig{}))
    EXPECT_EQ(c.label.find("predictive"), std::string::npos) << c.label;
  t.priorities = {0};
  t.arrival_cv = 3.0;  // bursty: no predictive batching, one class: no priority
  const auto bursty = labels(t);
  for (const std::string& l : bursty) {
    EXPECT_EQ(l.find("predictive"), std::string::npos) << l;
    EXPECT_EQ(l.find("priority"), std::string::npos) << l;
    EXPECT_EQ(l.find("kv_quant"), std::string::npos) << l;  // memory is not short
  }
  // The controller is always considered, whatever the traffic.
  EXPECT_NE(std::find(bursty.begin(), bursty.end(), "adaptive"), bursty.end());
}

TEST(Advise, TheProjectsBurstLoadsAreBurstyAndItsPoissonLoadsRegular) {
  const std::string dir = std::string(OPTIMATE_TEST_DATA_DIR) + "/../../configs/workloads/";
  for (const char* bursty : {"mixed-h200.toml", "overload-h200.toml"})
    EXPECT_FALSE(workload_traits(build_workload(load_workload_spec(dir + bursty))).regular()) << bursty;
  for (const char* poisson : {"steady-h200.toml", "long-context-h200.toml"})
    EXPECT_TRUE(workload_traits(build_workload(load_workload_spec(dir + poisson))).regular()) << poisson;
}

bool has_label(const std::vector<Candidate>& cs, const std::string& label) {
  return std::any_of(cs.begin(), cs.end(), [&](const Candidate& c) { return c.label == label; });
}

Candidate find_label(const std::vector<Candidate>& cs, const std::string& label) {
  for (const Candidate& c : cs)
    if (c.label == label) return c;
  throw std::runtime_error("no candidate " + label);
}

TEST(Advise, MemoryShortTriesKvQuantKeepingTheTopClassAtFullPrecision) {
  WorkloadTraits t;
  t.priorities = {3, 1};
  t.arrival_cv = 3.0;
  EXPECT_FALSE(has_label(guide_candidates(t, {}, EngineConfig{}), "kv_quant bits=8"));
  t.max_kv_usage = 0.95;
  const std::vector<Candidate> cs = guide_candidates(t, {}, EngineConfig{});
  const Candidate quant = find_label(cs, "kv_quant bits=8");
  ASSERT_EQ(quant.config.optimizers.size(), 1u);
  EXPECT_EQ(quant.config.optimizers[0].name, "kv_quant");
  EXPECT_EQ(std::get<int64_t>(quant.config.optimizers[0].options.at("bits")), 8);
  EXPECT_EQ(std::get<int64_t>(quant.config.optimizers[0].options.at("full_precision_min_priority")), 3);
  const Candidate both = find_label(cs, "adaptive + kv_quant");
  EXPECT_EQ(both.config.optimizers.size(), 2u);
  // Preempted requests add the preemption mode chosen by cost.
  EXPECT_FALSE(has_label(cs, "preemption_mode=auto"));
  t.default_preemptions = 12;
  EXPECT_EQ(find_label(guide_candidates(t, {}, EngineConfig{}), "preemption_mode=auto").config.preemption_mode, PreemptionMode::kAuto);
  // Lower-first clients: their most important class is the smallest value.
  EngineConfig lower;
  lower.priority_order = PriorityOrder::kLowerFirst;
  t.priorities = {1, 0};
  const Candidate lower_quant = find_label(guide_candidates(t, {}, lower), "kv_quant bits=8");
  EXPECT_EQ(std::get<int64_t>(lower_quant.config.optimizers[0].options.at("full_precision_min_priority")), 0);
  // One class: nothing is more important, every request may be quantized.
  t.priorities = {0};
  const Candidate one = find_label(guide_candidates(t, {}, EngineConfig{}), "kv_quant bits=8");
  EXPECT_FALSE(std::get<bool>(one.config.optimizers[0].options.at("priority_aware")));
}

TEST(Advise, WidelyVaryingLengthsTryThePreemptionModeAndKvQuotas) {
  WorkloadTraits t;
  t.priorities = {3, 1};
  t.arrival_cv = 3.0;
  t.length_spread = 2.0;
  EXPECT_FALSE(has_label(guide_candidates(t, {}, EngineConfig{}), "preemption_mode=auto"));
  t.length_spread = 6.0;
  const std::vector<Candidate> cs = guide_candidates(t, {}, EngineConfig{});
  EXPECT_TRUE(has_label(cs, "preemption_mode=auto"));
  const Candidate quota = find_label(cs, "adaptive, KV quota from 80%");
  EXPECT_EQ(quota.config.optimizers[0].name, "adaptive");
  EXPECT_DOUBLE_EQ(std::get<double>(quota.config.optimizers[0].options.at("kv_high")), 0.8);
  // A quota needs two classes.
  t.priorities = {0};
  EXPECT_FALSE(has_label(guide_candidates(t, {}, EngineConfig{}), "adaptive, KV quota from 80%"));
}

TEST(Advise, LengthSpreadIsReadFromTheWorkload) {
  WorkloadSpec even = mixed(10, {});
  even.prompt = {.kind = LengthKind::kUniform, .min = 4096, .max = 16384};
  even.output = {.kind = LengthKind::kUniform, .min = 128, .max = 1024};
  EXPECT_FALSE(workload_traits(build_workload(even)).lengths_vary());
  WorkloadSpec wide = mixed(10, {});
  wide.prompt = {.kind = LengthKind::kLognormal, .min = 16, .max = 4096, .mean = 512, .sigma = 0.8};
  wide.output = {.kind = LengthKind::kLognormal, .min = 8, .max = 1024, .mean = 200, .sigma = 0.7};
  EXPECT_TRUE(workload_traits(build_workload(wide)).lengths_vary());
}

TEST(Advise, ComputeBoundPointsAtKernelVariantsAndMonitoringIsAlwaysConsidered) {
  WorkloadTraits t;
  const std::vector<std::string> idle = guide_considerations(t);
  ASSERT_EQ(idle.size(), 1u);
  EXPECT_NE(idle[0].find("/metrics"), std::string::npos);
  t.busy_fraction = 0.99;
  t.compute_bound_share = 0.8;
  t.ridge_tokens = 180;
  const std::vector<std::string> busy = guide_considerations(t);
  ASSERT_EQ(busy.size(), 2u);
  EXPECT_NE(busy[0].find("--quantization fp8"), std::string::npos) << busy[0];
  EXPECT_NE(busy[0].find("--backend cuda"), std::string::npos) << busy[0];
}

TEST(Advise, TheRidgeOfTheH200ProfileSeparatesDecodeFromPrefill) {
  const CostModel cost(load_cost_profile(kProfile));
  // Bandwidth over FLOP/s of an H200 in bf16: a decode step of a few sequences reads its weights
  // for longer than it computes, a 2048-token prefill chunk the other way round.
  EXPECT_GT(cost.ridge_tokens(), 32);
  EXPECT_LT(cost.ridge_tokens(), 2048);
  const StepCost narrow = cost.step_cost({{.num_new_tokens = 1, .context_len = 0}});
  EXPECT_GT(narrow.weight_bytes / (cost.profile().memory_bandwidth_bytes_per_s * cost.profile().gemm_bandwidth_efficiency),
            narrow.gemm_flops / (cost.profile().peak_flops * cost.profile().gemm_compute_efficiency));
}

TEST(Advise, MemoryShortRunsKvQuantOnTheSimulatorWithFewerPreemptions) {
  // A cache far too small for the load: the default run preempts.
  WorkloadSpec spec = mixed(20, {}, ArrivalKind::kOffline);
  spec.num_requests = 120;
  spec.prompt = {.kind = LengthKind::kUniform, .min = 512, .max = 1024};
  spec.output = {.kind = LengthKind::kUniform, .min = 256, .max = 512};
  EngineConfig base;
  base.num_kv_blocks = 2000;
  const Advice advice = advise(build_workload(spec), load_cost_profile(kProfile), {}, base);
  EXPECT_TRUE(advice.traits.memory_pressure());
  EXPECT_GT(advice.traits.default_preemptions, 0);
  const std::string table = advice_markdown(advice);
  EXPECT_EQ(table.find("not in this build"), std::string::npos) << table;
  const AdviceRow* quant = nullptr;
  for (const AdviceRow& r : advice.rows)
    if (r.candidate.label == "kv_quant bits=8") quant = &r;
  ASSERT_NE(quant, nullptr) << table;
  EXPECT_EQ(quant->summary.failed, 0);
  // Quantized blocks free pages: fewer preemptions and more throughput than the default.
  EXPECT_LT(quant->summary.num_preemptions, advice.rows[0].summary.num_preemptions) << table;
  EXPECT_GT(quant->summary.output_throughput, advice.rows[0].summary.output_throughput) << table;
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
