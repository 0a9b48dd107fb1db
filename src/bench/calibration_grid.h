// The step shapes a calibration times on a real backend, chosen so that each term of the cost
// model dominates somewhere: decode batches of growing size (weight reads, then GEMM FLOPs, and
// per-sequence overhead) at short and long contexts (KV reads), prefill chunks of growing
// length (GEMM and attention FLOPs), and mixed steps like the ones a busy engine runs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runner/model_runner.h"
#include "bench/cost_model.h"
#include "core/clock.h"

namespace optimate::bench {

// Tokens a step runs: the sum of its sequences' new tokens.
int64_t num_new_tokens(const std::vector<SeqWork>& seqs);

struct GridShape {
  std::string name;           // "decode 8 seqs @512", "prefill 256"
  std::vector<SeqWork> seqs;  // one entry per sequence of the step
};

// What the engine being calibrated can run: the grid stays inside these.
struct GridLimits {
  int64_t max_num_seqs = 0;            // largest decode batch
  int64_t max_num_batched_tokens = 0;  // largest step in tokens
  int64_t max_model_len = 0;           // positions stay below this
  int64_t num_kv_blocks = 0;           // every sequence of a step gets its own blocks
  int64_t block_size = 0;
};

struct CalibrationGrid {
  std::vector<GridShape> shapes;
  std::vector<std::string> skipped;  // shapes left out, and why (KV cache or length limits)
};

// Error(kInvalidArgument) when a limit is < 1.
CalibrationGrid make_calibration_grid(const GridLimits& limits);

struct MeasuredShape {
  GridShape shape;
  std::vector<double> runs_s;  // timed forwards, after the warm-up
  double median_s = 0.0;
};

// Called after each pass over the grid: (pass from 1, passes including warm-up, its seconds).
using GridProgressFn = std::function<void(int, int, double)>;

// Runs `warmup` untimed passes over the shapes, then `repeats` passes timed on `clock`, and
// keeps each shape's median. Sequences write their KV into blocks of their own (block ids 0,
// 1, ... in shape order), so the runner must be idle: no engine may be using its cache
// meanwhile. Errors (kInvalidArgument): repeats < 1, warmup < 0, a shape needing more KV
// blocks or positions than the runner has.
std::vector<MeasuredShape> measure_grid(ModelRunner& runner, const Clock& clock, const std::vector<GridShape>& shapes,
                                        int warmup, int repeats, const GridProgressFn& progress = {});

}  // namespace optimate::bench
