#include "bench/calibrate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace optimate::bench {
namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// "decode 1 seqs @64, decode 2 seqs @64, ... (7 points)": the points a fitted term rests on.
std::string point_names(const FitResult& fit, bool (*selected)(const FittedPoint&)) {
  std::vector<std::string> names;
  for (const FittedPoint& p : fit.points)
    if (selected(p)) names.push_back(p.point.name);
  if (names.empty()) return "no point";
  return fmt::format("{} points: {}", names.size(), fmt::join(names, ", "));
}

void fill_sources(Calibration& c) {
  const CalibrationOptions& o = c.options;
  const FitResult& f = c.fit;
  CostProfile& p = c.fit.profile;
  const ModelConfig& m = p.model;
  auto& s = p.sources;
  s["model"] = fmt::format(
      "the calibrated runner's model: {} layers, hidden {}, FFN {}, {} heads, {} KV heads, "
      "head_dim {}, vocab {}; {}",
      m.num_layers, m.hidden_size, m.intermediate_size, m.num_heads, m.num_kv_heads, m.head_dim, m.vocab_size,
      o.storage_note);
  s["calibration"] = fmt::format(
      "`{}` on {}, {}: {} grid points; {} untimed and {} timed passes over the grid, each point's median "
      "kept; mean absolute error of the fitted model {:.1f}% (the calibration object lists every point)",
      o.command, c.date, o.device, c.measured.size(), o.warmup, o.repeats, f.mean_abs_error_pct);
  if (c.peaks_before && c.peaks_after) {
    const PeakProbe &a = *c.peaks_before, &b = *c.peaks_after;
    s["memory_bandwidth_bytes_per_s"] =
        fmt::format("{:.2f} GB/s, the better of two probes (before / after the grid: {:.2f} / {:.2f}): {}",
                    p.memory_bandwidth_bytes_per_s * 1e-9, a.memory_bandwidth_bytes_per_s * 1e-9,
                    b.memory_bandwidth_bytes_per_s * 1e-9, a.bandwidth_method);
    s["peak_flops"] =
        fmt::format("{:.1f} GFLOP/s, the better of two probes (before / after the grid: {:.1f} / {:.1f}): {}",
                    p.peak_flops * 1e-9, a.peak_flops * 1e-9, b.peak_flops * 1e-9, a.flops_method);
  }
  for (const std::string& note : f.notes) {
    const std::string key = note.substr(0, note.find(':'));
    s[key] += (s[key].empty() ? "" : "; ") + note.substr(note.find(':') + 2);
  }
  auto fitted = [&](const std::string& key, std::string text) {
    s[key] = text + (s[key].empty() ? "" : "; " + s[key]);
  };
  fitted("gemm_bandwidth_efficiency",
         fmt::format("fit: weights stream at {:.2f} GB/s where they bound the step ({})", f.weight_bytes_per_s * 1e-9,
                     point_names(f, [](const FittedPoint& x) { return !x.gemm_compute_bound; })));
  fitted("gemm_compute_efficiency",
         fmt::format("fit: GEMMs at {:.1f} GFLOP/s where their FLOPs bound the step ({})", f.gemm_flops_per_s * 1e-9,
                     point_names(f, [](const FittedPoint& x) { return x.gemm_compute_bound; })));
  fitted("attention_bandwidth_efficiency",
         fmt::format("fit: KV read at {:.2f} GB/s where KV reads bound attention ({}; the term grows with context)",
                     f.kv_bytes_per_s * 1e-9,
                     point_names(f, [](const FittedPoint& x) { return !x.attention_compute_bound; })));
  fitted("attention_compute_efficiency",
         fmt::format("fit: attention at {:.1f} GFLOP/s where its FLOPs bound it ({})", f.attention_flops_per_s * 1e-9,
                     point_names(f, [](const FittedPoint& x) { return x.attention_compute_bound; })));
  fitted("step_overhead_s", "fit: the step time's constant part beyond the roofline (least squares on relative error)");
  fitted("per_seq_overhead_s", "fit: the step time's growth per sequence beyond the roofline");
  s["num_kv_blocks"] =
      fmt::format("the calibrated engine's KV cache: {} blocks of {} tokens", p.num_kv_blocks, p.block_size);
  s["weight_bits"] = s["kv_bytes_per_element"] = o.storage_note;
}

}  // namespace

Calibration calibrate(ModelRunner& runner, const Clock& clock, const CalibrationOptions& options,
                      const GridProgressFn& progress) {
  if (options.weight_bits <= 0.0 || options.kv_bytes_per_element <= 0.0)
    fail(ErrorCode::kInvalidArgument, "calibration: weight_bits and kv_bytes_per_element must be > 0");
  const KvCacheShape& kv = runner.kv_shape();
  const CalibrationGrid grid = make_calibration_grid({.max_num_seqs = options.max_num_seqs,
                                                      .max_num_batched_tokens = options.max_num_batched_tokens,
                                                      .max_model_len = options.max_model_len,
                                                      .num_kv_blocks = kv.num_blocks,
                                                      .block_size = kv.block_size});
  Calibration c;
  c.options = options;
  c.skipped = grid.skipped;
  if (options.probe_peaks) c.peaks_before = options.probe_peaks();
  c.measured = measure_grid(runner, clock, grid.shapes, options.warmup, options.repeats, progress);
  if (options.probe_peaks) c.peaks_after = options.probe_peaks();
  c.date = utc_now();

  CostProfile base;
  base.name = options.name;
  base.device = options.device;
  base.model = runner.config();
  base.weight_bits = options.weight_bits;
  base.kv_bytes_per_element = options.kv_bytes_per_element;
  if (c.peaks_before && c.peaks_after) {
    base.memory_bandwidth_bytes_per_s =
        std::max(c.peaks_before->memory_bandwidth_bytes_per_s, c.peaks_after->memory_bandwidth_bytes_per_s);
    base.peak_flops = std::max(c.peaks_before->peak_flops, c.peaks_after->peak_flops);
  }
  base.num_kv_blocks = kv.num_blocks;
  base.block_size = kv.block_size;
  std::vector<FitPoint> points;
  for (const MeasuredShape& m : c.measured) points.push_back({m.shape.name, m.shape.seqs, m.median_s});
  c.fit = fit_cost_profile(base, points);
  fill_sources(c);
  return c;
}

std::string calibration_to_json(const Calibration& c) {
  nlohmann::json j = nlohmann::json::parse(cost_profile_to_json(c.fit.profile));
  nlohmann::json points = nlohmann::json::array();
  for (size_t i = 0; i < c.fit.points.size(); ++i) {
    const FittedPoint& p = c.fit.points[i];
    int64_t context = 0;
    for (const SeqWork& w : p.point.seqs) context += w.context_len;
    points.push_back({{"name", p.point.name},
                      {"seqs", p.point.seqs.size()},
                      {"tokens", num_new_tokens(p.point.seqs)},
                      {"context_tokens", context},
                      {"measured_s", p.point.measured_s},
                      {"runs_s", c.measured.at(i).runs_s},
                      {"predicted_s", p.predicted_s},
                      {"error_pct", p.error_pct},
                      {"gemm_bound_by", p.gemm_compute_bound ? "flops" : "weight bytes"},
                      {"attention_bound_by", p.attention_compute_bound ? "flops" : "kv bytes"}});
  }
  j["calibration"] = {{"date", c.date},
                      {"command", c.options.command},
                      {"device", c.options.device},
                      {"warmup", c.options.warmup},
                      {"repeats", c.options.repeats},
                      {"achieved",
                       {{"weight_bytes_per_s", c.fit.weight_bytes_per_s},
                        {"kv_bytes_per_s", c.fit.kv_bytes_per_s},
                        {"gemm_flops_per_s", c.fit.gemm_flops_per_s},
                        {"attention_flops_per_s", c.fit.attention_flops_per_s}}},
                      {"mean_abs_error_pct", c.fit.mean_abs_error_pct},
                      {"points", points},
                      {"skipped", c.skipped}};
  return j.dump(2) + "\n";
}

std::string render_calibration(const Calibration& c) {
  const CostProfile& p = c.fit.profile;
  std::string out = fmt::format("## Calibration of {} on {}\n\n", p.name, p.device);
  out +=
      "| step | seqs | tokens | measured (ms) | predicted (ms) | error | bound by |\n"
      "|---|---:|---:|---:|---:|---:|---|\n";
  for (const FittedPoint& f : c.fit.points)
    out += fmt::format("| {} | {} | {} | {:.2f} | {:.2f} | {:+.1f}% | {}, {} |\n", f.point.name, f.point.seqs.size(),
                       num_new_tokens(f.point.seqs), f.point.measured_s * 1e3, f.predicted_s * 1e3, f.error_pct,
                       f.gemm_compute_bound ? "GEMM FLOPs" : "weight reads",
                       f.attention_compute_bound ? "attention FLOPs" : "KV reads");
  out +=
      fmt::format("\nMean absolute error {:.1f}% over {} points.\n\n", c.fit.mean_abs_error_pct, c.fit.points.size());
  out +=
      fmt::format("- memory bandwidth {:.2f} GB/s; weights at {:.3f} of it, KV at {:.3f}\n",
                  p.memory_bandwidth_bytes_per_s * 1e-9, p.gemm_bandwidth_efficiency, p.attention_bandwidth_efficiency);
  out += fmt::format("- peak {:.1f} GFLOP/s; GEMMs at {:.3f} of it, attention at {:.3f}\n", p.peak_flops * 1e-9,
                     p.gemm_compute_efficiency, p.attention_compute_efficiency);
  out += fmt::format("- overhead {:.3f} ms per step + {:.4f} ms per sequence\n", p.step_overhead_s * 1e3,
                     p.per_seq_overhead_s * 1e3);
  for (const std::string& n : c.fit.notes) out += "- " + n + "\n";
  for (const std::string& s : c.skipped) out += "- skipped " + s + "\n";
  return out;
}

}  // namespace optimate::bench
