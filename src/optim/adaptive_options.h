// Options of the adaptive controller ([optimizers.adaptive]): its targets, its timing, and the
// bounds and step rules of every knob it moves. A bound of 0 is derived from the engine at the
// first tick (a quarter and four times the configured value, never past what the runner
// allocated).
#pragma once

#include <cstdint>

namespace optimate::optim {

class OptionReader;

struct AdaptiveOptions {
  // Targets; 0: none. With neither, the controller only raises the batch limits while
  // requests queue behind them (throughput).
  double ttft_p99_ms = 0.0;
  double tpot_p99_ms = 0.0;
  // Timing: a tick every interval_ms of engine time over the last window_ms.
  double interval_ms = 500.0;
  double window_ms = 5000.0;
  int64_t min_samples = 20;  // fewer TTFT/TPOT samples in the window: the percentile is ignored
  // Hysteresis: a knob moves back (toward throughput) only while its latency is under
  // band x target.
  double band = 0.8;
  int64_t confirm_intervals = 2;   // ticks a wish must repeat before a knob moves
  int64_t cooldown_intervals = 2;  // ticks between two moves of one knob (doubled after a reversal)
  double up_factor = 1.25;
  double down_factor = 0.8;
  // Bounds of the batch limits (0: derived).
  int64_t max_num_seqs_min = 0;
  int64_t max_num_seqs_max = 0;
  int64_t max_num_batched_tokens_min = 0;
  int64_t max_num_batched_tokens_max = 0;
  // KV quota per priority class, set while KV usage is at or above kv_high and cleared below
  // kv_low, when two or more classes run.
  bool kv_quota = true;
  double kv_high = 0.9;
  double kv_low = 0.7;
  double reserve_share = 0.1;   // of the pool, kept for the most important class
  double long_max_share = 0.5;  // of the pool, the most one class's long generations may hold
  int64_t long_min_tokens = 512;  // max_tokens from which a request is a long generation
  // KV quantization (kv_quant enabled, the cache laid out for it): one level stronger (8-bit,
  // then 4-bit where the cache holds it) while KV usage is at or above kv_high and requests
  // queue or are preempted; one level weaker below kv_low, back to kv_quant's own settings.
  bool kv_quant = true;
  // The batch policy's longest hold from the arrival rate λ: batch_arrivals / λ, at most
  // batch_max_wait_ms (and a tenth of the TTFT target); 0 (no hold) while fewer than one
  // arrival is expected within batch_max_wait_ms, back on from two.
  bool batch_wait = true;
  double batch_max_wait_ms = 50.0;
  double batch_arrivals = 4.0;

  // Reads and checks every option; errors name the option.
  static AdaptiveOptions read(OptionReader& reader);
};

}  // namespace optimate::optim
