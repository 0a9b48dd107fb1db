// Stability of the adaptive controller on the simulated H200 (Llama-3-8B shape) with the fake
// clock: a load step (x2 and back) and a day-shaped load. The controller must settle within a
// stated number of intervals after each change of load and hold its TTFT target once settled,
// and the direction of each knob may change only a bounded number of times. Deterministic:
// the same run gives the same trajectory on any machine.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "bench/bench_target.h"
#include "bench/in_process.h"
#include "bench/stats.h"

namespace optimate::bench {
namespace {

const std::string kProfile =
    std::string(OPTIMATE_TEST_DATA_DIR) + "/../../profiles/h200-llama3-8b-calibrated.json";
constexpr double kIntervalS = 0.5;  // the controller's default interval
// After a change of load, no batch limit moves later than this many intervals.
constexpr int kSettleIntervals = 30;

struct Move {
  double t_s = 0.0;
  std::string knob;
  double from = 0.0;
  double to = 0.0;
};

struct Outcome {
  RunResult run;
  std::vector<Move> moves;  // of max_num_seqs and max_num_batched_tokens
};

Workload phased(std::vector<ArrivalPhase> phases, int64_t num_requests) {
  WorkloadSpec spec;
  spec.name = "stability";
  spec.seed = 5;
  spec.num_requests = num_requests;
  spec.arrival.kind = ArrivalKind::kPhases;
  spec.arrival.phases = std::move(phases);
  spec.prompt = {.kind = LengthKind::kLognormal, .min = 16, .max = 4096, .mean = 512, .sigma = 0.8};
  spec.output = {.kind = LengthKind::kLognormal, .min = 8, .max = 1024, .mean = 200, .sigma = 0.7};
  spec.token_id_min = 1000;
  spec.token_id_max = 4000;
  return build_workload(spec);
}

Outcome run(const Workload& w, std::vector<OptimizerSpec> optimizers, const std::string& name) {
  EngineConfig c;
  c.max_num_seqs = 32;
  c.optimizers = std::move(optimizers);
  const std::string log = ::testing::TempDir() + "/stability-" + name + ".jsonl";
  std::filesystem::remove(log);
  c.decision_log = log;
  Outcome out;
  {
    BuiltEngine target = build_sim_engine(c, load_cost_profile(kProfile), w.spec.token_id_max + 1);
    out.run = run_in_process(target, w);
  }
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json r = nlohmann::json::parse(line);
    if (r["event"] != "controller") continue;
    const std::string knob = r["knob"];
    if (knob != "max_num_seqs" && knob != "max_num_batched_tokens") continue;
    out.moves.push_back({r["t_s"].get<double>(), knob, r["from"].get<double>(), r["to"].get<double>()});
  }
  return out;
}

// P99 TTFT (ms) of the requests that arrived in [from_s, to_s).
double ttft_p99_ms(const RunResult& r, double from_s, double to_s) {
  std::vector<double> v;
  for (const RequestRecord& rec : r.records)
    if (rec.success && rec.arrival_s >= from_s && rec.arrival_s < to_s) v.push_back((rec.first_token_s - rec.arrival_s) * 1e3);
  return percentile(v, 99);
}

std::map<std::string, int> reversals(const std::vector<Move>& moves) {
  std::map<std::string, int> out;
  std::map<std::string, int> last_direction;
  for (const Move& m : moves) {
    const int d = m.to > m.from ? 1 : -1;
    int& last = last_direction[m.knob];
    if (last != 0 && d != last) ++out[m.knob];
    last = d;
  }
  return out;
}

TEST(ControllerStability, LoadStepUpAndBackSettlesAndHoldsTheTarget) {
  // 10 req/s for 40 s, 20 req/s for 40 s, 10 req/s again: the step outgrows 32 sequences.
  const Workload w = phased({{40, 10}, {40, 20}, {40, 10}}, 1600);
  const Outcome fixed = run(w, {}, "static");
  // The step is real: the static limit misses the target while the load is doubled.
  EXPECT_GT(ttft_p99_ms(fixed.run, 50, 80), 500);

  const Outcome adaptive = run(w, {{"adaptive", {{"ttft_p99_ms", 500.0}, {"tpot_p99_ms", 15.0}}, true}}, "step");
  ASSERT_FALSE(adaptive.moves.empty());
  for (const double change_s : {0.0, 40.0, 80.0})
    for (const Move& m : adaptive.moves)
      EXPECT_FALSE(m.t_s > change_s + kSettleIntervals * kIntervalS && m.t_s < change_s + 40)
          << m.knob << " moved at " << m.t_s << " s, after the load change at " << change_s << " s had settled";
  EXPECT_LE(ttft_p99_ms(adaptive.run, 40 + kSettleIntervals * kIntervalS, 80), 500);
  EXPECT_LE(ttft_p99_ms(adaptive.run, 80 + kSettleIntervals * kIntervalS, 120), 500);
  for (const auto& [knob, n] : reversals(adaptive.moves)) EXPECT_LE(n, 1) << knob;
  // Every request finished: retuning never drops one.
  for (const RequestRecord& rec : adaptive.run.records) EXPECT_TRUE(rec.success) << rec.id << ": " << rec.error;
}

TEST(ControllerStability, ADayShapedLoadMovesEachKnobFewTimesAndNeverFasterThanItsRateLimit) {
  // A day compressed into two minutes: 24 "hours" of 5 s, 4 to 20 req/s, peak in the
  // afternoon; tight targets that pull the knobs both ways.
  std::vector<ArrivalPhase> day;
  for (int h = 0; h < 24; ++h) day.push_back({5.0, 12.0 + 8.0 * std::sin(2 * M_PI * (h - 6) / 24.0)});
  const Workload w = phased(day, 1440);
  const Outcome adaptive = run(w, {{"adaptive", {{"ttft_p99_ms", 300.0}, {"tpot_p99_ms", 10.0}}, true}}, "day");
  ASSERT_FALSE(adaptive.moves.empty());
  for (const auto& [knob, n] : reversals(adaptive.moves)) EXPECT_LE(n, 4) << knob;
  std::map<std::string, double> last;
  std::map<std::string, int> count;
  for (const Move& m : adaptive.moves) {
    // A wish confirmed over two intervals, then a cooldown of two: at most one move in three.
    if (last.count(m.knob)) EXPECT_GE(m.t_s - last[m.knob], 3 * kIntervalS - 1e-6) << m.knob << " at " << m.t_s;
    last[m.knob] = m.t_s;
    EXPECT_LE(++count[m.knob], 12) << m.knob;
  }
  for (const RequestRecord& rec : adaptive.run.records) EXPECT_TRUE(rec.success) << rec.id;
}

}  // namespace
}  // namespace optimate::bench
