#include "apps/bench_calibrate.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "bench/bench_target.h"
#include "bench/calibrate.h"
#include "bench/cpu_peaks.h"
#include "bench/report_files.h"
#include "bench/toml_override.h"
#include "core/error.h"

namespace optimate::apps {
namespace {

std::string command_line(const CalibrateArgs& a) {
  std::string s = fmt::format("optimate bench --calibrate --backend {} --compare {}", a.backend, a.config);
  if (!a.model.empty()) s += " --model " + a.model;
  for (const auto& set : a.sets) s += " --set " + set;
  return s + " --out " + a.out;
}

}  // namespace

void run_calibration(const CalibrateArgs& a) {
  if (a.backend == "sim")
    fail(ErrorCode::kUnsupported,
         "--calibrate measures a real backend (--backend auto, cpu or cuda); the sim backend is the cost "
         "model itself");
  if (a.out.empty()) fail(ErrorCode::kInvalidArgument, "--calibrate needs --out FILE.json, the profile to write");
  if (a.config.find(',') != std::string::npos)
    fail(ErrorCode::kInvalidArgument, "--calibrate measures one configuration; got --compare {}", a.config);
  if (!a.workload.empty() || !a.sweep.empty())
    fail(ErrorCode::kInvalidArgument, "--calibrate runs no workload: drop --workload and --sweep");
  for (const std::string& s : a.sets)
    if (bench::split_assignment(s).first.rfind("workload.", 0) == 0)
      fail(ErrorCode::kInvalidArgument, "--set {}: --calibrate runs no workload", s);
  // The profile's folder, made before the grid runs rather than after.
  if (const auto dir = std::filesystem::path(a.out).parent_path(); !dir.empty()) bench::prepare_report_dir(dir.string());

  bench::NamedConfig named = bench::load_named_config(a.config, a.sets, EngineConfig{});
  if (!a.model.empty()) named.config.model = a.model;
  named.config.device = parse_choice<Device>(a.backend, "--backend");
  bench::BuiltEngine built = bench::build_engine(named.config);
  const EngineConfig& ec = built.engine->config();
  const int threads = static_cast<int>(ec.num_threads);

  bench::CalibrationOptions o;
  o.name = std::filesystem::path(a.out).stem().string();
  o.command = command_line(a);
  o.max_num_seqs = ec.max_num_seqs;
  o.max_num_batched_tokens = ec.max_num_batched_tokens;
  o.max_model_len = ec.max_model_len;
  // What the runner stores, as it reports it: its weight bytes (the embedding table included,
  // a matrix of its own when the LM head is not tied to it) over the parameters they hold, and
  // its KV cache's element width.
  const ModelConfig& mc = built.engine->runner().config();
  const double params = bench::CostModel::matmul_params(mc) +
                        (mc.tie_word_embeddings ? 0.0 : double(mc.vocab_size) * double(mc.hidden_size));
  const double weight_bytes = static_cast<double>(built.observer->weight_bytes());
  o.weight_bits = 8.0 * weight_bytes / params;
  const kv::KvLayout& kv_layout = built.engine->runner().kv_shape().layout;
  o.kv_bytes_per_element = static_cast<double>(kv::kv_precision_bits(kv_layout.base)) / 8.0;
  o.storage_note = fmt::format(
      "the {} backend holds {:.1f} MB of weights for {:.1f} M matrix and embedding parameters ({:.2f} bits "
      "each) and keeps its KV cache in {}-bit values",
      built.device, weight_bytes / 1e6, params / 1e6, o.weight_bits, kv::kv_precision_bits(kv_layout.base));
  if (built.device == "cuda") {
    // No independent probe on the GPU: the peaks are the best rates the backend reaches.
    o.device = built.target;
  } else {
    o.device = bench::describe_cpu(threads);
    o.probe_peaks = [threads] {
      const bench::PeakProbe p = bench::measure_cpu_peaks(threads);
      std::fprintf(stderr, "Peaks: %.2f GB/s copy, %.1f GFLOP/s matmul\n", p.memory_bandwidth_bytes_per_s * 1e-9,
                   p.peak_flops * 1e-9);
      return p;
    };
  }

  auto progress = [&o](int pass, int passes, double seconds) {
    std::fprintf(stderr, "pass %d/%d over the grid (%s): %.1f s\n", pass, passes, pass <= o.warmup ? "warm-up" : "timed",
                 seconds);
  };
  const bench::Calibration c = bench::calibrate(*built.observer, *built.clock, o, progress);
  std::ofstream out(a.out, std::ios::binary);
  out << bench::calibration_to_json(c);
  out.close();
  if (!out) fail(ErrorCode::kInvalidArgument, "cannot write {}", a.out);
  std::fputs(bench::render_calibration(c).c_str(), stdout);
  std::fprintf(stdout, "\nProfile written to %s\n", a.out.c_str());
}

}  // namespace optimate::apps
