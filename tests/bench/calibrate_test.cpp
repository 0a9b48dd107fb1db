// Calibration: timed on a runner whose step times come from a cost model with known
// parameters, the fit gives those parameters back; bad inputs are refused with clear errors.
#include "bench/calibrate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench/bench_target.h"
#include "core/error.h"

namespace optimate::bench {
namespace {

const std::string kProfiles = std::string(OPTIMATE_TEST_DATA_DIR) + "/../../profiles/";
const std::string kH200 = kProfiles + "h200-llama3-8b.json";

// SmolLM2-135M's shape with CPU-like figures, all chosen here.
CostProfile cpu_like_profile() {
  CostProfile p;
  p.name = "known";
  p.device = "synthetic";
  p.model.num_layers = 30;
  p.model.hidden_size = 576;
  p.model.intermediate_size = 1536;
  p.model.num_heads = 9;
  p.model.num_kv_heads = 3;
  p.model.head_dim = 64;
  p.model.vocab_size = 49152;
  p.model.max_position_embeddings = 8192;
  p.weight_bits = 32;
  p.kv_bytes_per_element = 4;
  p.memory_bandwidth_bytes_per_s = 20e9;
  p.peak_flops = 100e9;
  p.gemm_bandwidth_efficiency = 0.8;
  p.gemm_compute_efficiency = 0.6;
  p.attention_bandwidth_efficiency = 0.5;
  p.attention_compute_efficiency = 0.2;
  p.step_overhead_s = 2e-3;
  p.per_seq_overhead_s = 5e-5;
  p.num_kv_blocks = 1456;
  p.block_size = 16;
  return p;
}

CalibrationOptions options_for(const CostProfile& p, bool probe) {
  CalibrationOptions o;
  o.name = "fitted";
  o.device = "synthetic";
  o.command = "test";
  o.weight_bits = p.weight_bits;
  o.kv_bytes_per_element = p.kv_bytes_per_element;
  o.storage_note = "as the known profile";
  if (probe) o.probe_peaks = [p] { return PeakProbe{p.memory_bandwidth_bytes_per_s, p.peak_flops, "known", "known"}; };
  o.max_num_seqs = 64;
  o.max_num_batched_tokens = 2048;
  o.max_model_len = p.model.max_position_embeddings;
  return o;
}

// Calibrates the simulated backend of `known`: its forwards advance a fake clock by exactly
// the known profile's step cost.
Calibration calibrate_sim(const CostProfile& known, bool probe) {
  EngineConfig config;
  BuiltEngine sim = build_sim_engine(config, known, known.model.vocab_size);
  return calibrate(*sim.observer, *sim.clock, options_for(known, probe));
}

void expect_recovered(const CostProfile& known, const CostProfile& fit, double rel) {
  EXPECT_NEAR(fit.gemm_bandwidth_efficiency, known.gemm_bandwidth_efficiency, rel * known.gemm_bandwidth_efficiency);
  EXPECT_NEAR(fit.gemm_compute_efficiency, known.gemm_compute_efficiency, rel * known.gemm_compute_efficiency);
  EXPECT_NEAR(fit.attention_bandwidth_efficiency, known.attention_bandwidth_efficiency,
              rel * known.attention_bandwidth_efficiency);
  EXPECT_NEAR(fit.attention_compute_efficiency, known.attention_compute_efficiency,
              rel * known.attention_compute_efficiency);
  EXPECT_NEAR(fit.step_overhead_s, known.step_overhead_s, rel * known.step_overhead_s);
  EXPECT_NEAR(fit.per_seq_overhead_s, known.per_seq_overhead_s, rel * known.per_seq_overhead_s);
}

TEST(Calibrate, RecoversAKnownCpuLikeProfile) {
  const CostProfile known = cpu_like_profile();
  const Calibration c = calibrate_sim(known, true);
  const CostProfile& fit = c.fit.profile;
  EXPECT_DOUBLE_EQ(fit.memory_bandwidth_bytes_per_s, known.memory_bandwidth_bytes_per_s);
  EXPECT_DOUBLE_EQ(fit.peak_flops, known.peak_flops);
  expect_recovered(known, fit, 0.01);
  EXPECT_EQ(fit.num_kv_blocks, known.num_kv_blocks);
  EXPECT_EQ(fit.block_size, known.block_size);
  EXPECT_LT(c.fit.mean_abs_error_pct, 0.1);
  EXPECT_TRUE(c.fit.notes.empty());
  // Both sides of both maxima occur on this grid.
  bool gemm_flops = false, gemm_bytes = false;
  for (const FittedPoint& p : c.fit.points) (p.gemm_compute_bound ? gemm_flops : gemm_bytes) = true;
  EXPECT_TRUE(gemm_flops && gemm_bytes);
}

TEST(Calibrate, RecoversTheShippedH200Profile) {
  const CostProfile known = load_cost_profile(kH200);
  const Calibration c = calibrate_sim(known, true);
  expect_recovered(known, c.fit.profile, 0.01);
  EXPECT_LT(c.fit.mean_abs_error_pct, 0.1);
}

TEST(Calibrate, WithoutAProbeThePeaksAreTheBestRatesReached) {
  const CostProfile known = cpu_like_profile();
  const CostProfile fit = calibrate_sim(known, false).fit.profile;
  // What the simulator computes depends on peak x efficiency, which must match.
  EXPECT_NEAR(fit.memory_bandwidth_bytes_per_s * fit.gemm_bandwidth_efficiency, 16e9, 16e9 * 0.01);
  EXPECT_NEAR(fit.memory_bandwidth_bytes_per_s * fit.attention_bandwidth_efficiency, 10e9, 10e9 * 0.01);
  EXPECT_NEAR(fit.peak_flops * fit.gemm_compute_efficiency, 60e9, 60e9 * 0.01);
  EXPECT_NEAR(fit.peak_flops * fit.attention_compute_efficiency, 20e9, 20e9 * 0.01);
  EXPECT_DOUBLE_EQ(fit.gemm_compute_efficiency, 1.0);
  EXPECT_DOUBLE_EQ(fit.gemm_bandwidth_efficiency, 1.0);
}

TEST(Calibrate, NoisyTimesStillGiveTheParametersWithinAFewPercent) {
  const CostProfile known = cpu_like_profile();
  const CostModel model(known);
  const CalibrationGrid grid = make_calibration_grid({64, 2048, 8192, known.num_kv_blocks, known.block_size});
  std::vector<FitPoint> points;
  for (size_t i = 0; i < grid.shapes.size(); ++i) {
    const double noise = 1.0 + 0.01 * std::sin(double(i) * 2.3);  // +-1%, deterministic
    points.push_back({grid.shapes[i].name, grid.shapes[i].seqs, model.step_cost(grid.shapes[i].seqs).seconds * noise});
  }
  CostProfile base = known;
  const FitResult fit = fit_cost_profile(base, points);
  EXPECT_NEAR(fit.profile.gemm_bandwidth_efficiency, 0.8, 0.8 * 0.03);
  EXPECT_NEAR(fit.profile.gemm_compute_efficiency, 0.6, 0.6 * 0.03);
  EXPECT_NEAR(fit.profile.attention_compute_efficiency, 0.2, 0.2 * 0.05);
  EXPECT_NEAR(fit.profile.attention_bandwidth_efficiency, 0.5, 0.5 * 0.05);
  EXPECT_LT(fit.mean_abs_error_pct, 1.5);
}

TEST(Calibrate, AProbedPeakCapsEveryEfficiencyAtOne) {
  // The probe claims less bandwidth than the weights actually stream at (16 GB/s).
  const CostProfile known = cpu_like_profile();
  EngineConfig config;
  BuiltEngine sim = build_sim_engine(config, known, known.model.vocab_size);
  CalibrationOptions o = options_for(known, true);
  // Two probes, the better of which is kept.
  int probes = 0;
  o.probe_peaks = [&] { return PeakProbe{++probes == 1 ? 12e9 : 11e9, known.peak_flops, "low", "known"}; };
  const FitResult fit = calibrate(*sim.observer, *sim.clock, o).fit;
  EXPECT_EQ(probes, 2);
  EXPECT_DOUBLE_EQ(fit.profile.memory_bandwidth_bytes_per_s, 12e9);
  EXPECT_DOUBLE_EQ(fit.profile.gemm_bandwidth_efficiency, 1.0);
  for (double e : {fit.profile.gemm_compute_efficiency, fit.profile.attention_bandwidth_efficiency,
                   fit.profile.attention_compute_efficiency})
    EXPECT_LE(e, 1.0);
  ASSERT_FALSE(fit.notes.empty());
  EXPECT_EQ(fit.notes.front().rfind("gemm_bandwidth_efficiency: at the peak", 0), 0u) << fit.notes.front();
  EXPECT_GT(fit.mean_abs_error_pct, 0.1);  // the cap costs accuracy, and it shows
}

TEST(Calibrate, ProfileJsonLoadsBackWithItsCalibration) {
  const CostProfile known = cpu_like_profile();
  const Calibration c = calibrate_sim(known, true);
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "optimate_calibrated_profile.json";
  std::ofstream(path) << calibration_to_json(c);
  const CostProfile loaded = load_cost_profile(path.string());
  std::filesystem::remove(path);
  EXPECT_EQ(loaded.name, "fitted");
  expect_recovered(known, loaded, 0.01);
  EXPECT_NE(loaded.sources.at("calibration").find("mean absolute error"), std::string::npos);
  EXPECT_NE(loaded.sources.at("gemm_compute_efficiency").find("GFLOP/s"), std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(calibration_to_json(c));
  ASSERT_EQ(j["calibration"]["points"].size(), c.measured.size());
  EXPECT_GT(c.measured.size(), 20u);
  const std::string table = render_calibration(c);
  EXPECT_NE(table.find("| decode 1 seqs @64 | 1 | 1 |"), std::string::npos) << table;
}

// The shipped CPU profile still predicts what it recorded: a change to the cost model that
// would make it stale fails here (recalibrate with the command in its sources).
TEST(Calibrate, ShippedCpuProfileMatchesItsRecordedPredictions) {
  const std::string path = kProfiles + "cpu-smollm2.json";
  const CostModel model(load_cost_profile(path));
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  const CalibrationGrid grid = make_calibration_grid({64, 2048, model.profile().model.max_position_embeddings,
                                                      model.profile().num_kv_blocks, model.profile().block_size});
  ASSERT_EQ(j["calibration"]["points"].size(), grid.shapes.size());
  double abs_error_sum = 0.0;
  for (const nlohmann::json& point : j["calibration"]["points"]) {
    auto shape = std::find_if(grid.shapes.begin(), grid.shapes.end(),
                              [&](const GridShape& s) { return s.name == point["name"].get<std::string>(); });
    ASSERT_NE(shape, grid.shapes.end()) << point["name"];
    const double predicted = point["predicted_s"].get<double>(), measured = point["measured_s"].get<double>();
    EXPECT_NEAR(model.step_cost(shape->seqs).seconds, predicted, 1e-9 + 1e-9 * predicted) << shape->name;
    abs_error_sum += std::abs(predicted - measured) / measured * 100.0;
  }
  EXPECT_NEAR(j["calibration"]["mean_abs_error_pct"].get<double>(), abs_error_sum / double(grid.shapes.size()), 1e-6);
}

TEST(Calibrate, GridStaysInsideTheKvCacheAndSaysWhatItSkipped) {
  const CalibrationGrid grid = make_calibration_grid({64, 2048, 8192, 100, 16});  // 1600 tokens of KV
  for (const GridShape& s : grid.shapes) {
    int64_t blocks = 0;
    for (const SeqWork& w : s.seqs) blocks += (w.context_len + w.num_new_tokens + 15) / 16;
    EXPECT_LE(blocks, 100) << s.name;
  }
  ASSERT_FALSE(grid.skipped.empty());
  EXPECT_NE(grid.skipped.front().find("KV blocks > the cache's 100"), std::string::npos) << grid.skipped.front();
}

template <typename F>
void expect_error(F&& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one saying: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(Calibrate, BadInputsAreClearErrors) {
  const CostProfile known = cpu_like_profile();
  expect_error([&] { fit_cost_profile(known, {{"a", {{1, 0}}, 0.01}}); }, "at least 6 points");
  std::vector<FitPoint> points(6, FitPoint{"decode", {{1, 64}}, 0.03});
  points[3].measured_s = -1.0;
  expect_error([&] { fit_cost_profile(known, points); }, "'decode': measured time -1 s is not a positive number");
  points[3] = {"empty", {}, 0.03};
  expect_error([&] { fit_cost_profile(known, points); }, "'empty' has no sequences");
  expect_error([&] { make_calibration_grid({0, 2048, 8192, 100, 16}); }, "max_num_seqs must be >= 1");
  EngineConfig config;
  BuiltEngine sim = build_sim_engine(config, known, 100);
  ModelRunner& runner = *sim.observer;
  expect_error([&] { measure_grid(runner, *sim.clock, {}, 1, 0); }, "repeats >= 1");
  const GridShape too_long{"long", {{1, 8192}}};
  expect_error([&] { measure_grid(runner, *sim.clock, {too_long}, 0, 1); },
               "'long' needs 513 KV blocks and 8193 positions");
}

}  // namespace
}  // namespace optimate::bench
