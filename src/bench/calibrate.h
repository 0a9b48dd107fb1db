// `optimate bench --calibrate`: times a real backend's forward over the calibration grid, fits
// the cost model to the times, and writes the profile the simulated backend runs on, with the
// per-point residuals that show how far to trust it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runner/model_runner.h"
#include "bench/calibration_fit.h"
#include "bench/calibration_grid.h"
#include "bench/cpu_peaks.h"
#include "core/clock.h"

namespace optimate::bench {

struct CalibrationOptions {
  std::string name;     // the profile's name: "cpu-smollm2"
  std::string device;   // "AMD EPYC, 2 logical cores (2 threads used)"
  std::string command;  // the command line that writes the profile, for its sources
  // How the backend stores weights and KV, and why (the profile's sources say it).
  double weight_bits = 16.0;
  double kv_bytes_per_element = 2.0;
  std::string storage_note;
  // Measures the machine's peaks; run before and after the grid, the better of each is kept.
  // Empty: the peaks are the best rates the backend reaches.
  std::function<PeakProbe()> probe_peaks;
  // The engine's limits; the KV capacity comes from the runner itself.
  int64_t max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t max_model_len = 0;
  int warmup = 1;
  int repeats = 3;
};

struct Calibration {
  FitResult fit;  // fit.profile is the calibrated profile, sources filled
  std::vector<MeasuredShape> measured;
  std::vector<std::string> skipped;  // grid shapes the engine cannot run
  CalibrationOptions options;
  std::optional<PeakProbe> peaks_before, peaks_after;  // the grid's
  std::string date;                                    // UTC, ISO 8601
};

// `runner` must be idle (no engine stepping it): its KV cache is overwritten.
Calibration calibrate(ModelRunner& runner, const Clock& clock, const CalibrationOptions& options,
                      const GridProgressFn& progress = {});

// The profile JSON (load_cost_profile reads it) with a "calibration" object: how it was made,
// each point's measured and predicted step time, and the mean absolute error.
std::string calibration_to_json(const Calibration& calibration);

// A Markdown table of measured against predicted step times, with the fitted figures.
std::string render_calibration(const Calibration& calibration);

}  // namespace optimate::bench
