#include "optim/adaptive_options.h"

#include "core/error.h"
#include "optim/registry.h"

namespace optimate::optim {
namespace {

void at_least(double v, double low, const char* key) {
  if (!(v >= low)) fail(ErrorCode::kInvalidArgument, "optimizers.adaptive.{} must be >= {}, got {}", key, low, v);
}

void in_range(double v, double low, double high, const char* key) {
  if (!(v >= low && v <= high))
    fail(ErrorCode::kInvalidArgument, "optimizers.adaptive.{} must be in [{}, {}], got {}", key, low, high, v);
}

void bounds(int64_t min, int64_t max, const char* what) {
  if (min < 0 || max < 0 || (max > 0 && min > max))
    fail(ErrorCode::kInvalidArgument, "optimizers.adaptive.{0}_min/{0}_max: need 0 <= min <= max "
         "(0: derived), got {1} and {2}", what, min, max);
}

}  // namespace

AdaptiveOptions AdaptiveOptions::read(OptionReader& r) {
  AdaptiveOptions o;
  o.ttft_p99_ms = r.get_double("ttft_p99_ms", o.ttft_p99_ms);
  at_least(o.ttft_p99_ms, 0, "ttft_p99_ms");
  o.tpot_p99_ms = r.get_double("tpot_p99_ms", o.tpot_p99_ms);
  at_least(o.tpot_p99_ms, 0, "tpot_p99_ms");
  o.interval_ms = r.get_ms("interval_ms", o.interval_ms);
  at_least(o.interval_ms, 1, "interval_ms");
  o.window_ms = r.get_ms("window_ms", o.window_ms);
  at_least(o.window_ms, o.interval_ms, "window_ms");
  o.min_samples = r.get_int("min_samples", o.min_samples);
  at_least(static_cast<double>(o.min_samples), 1, "min_samples");
  o.band = r.get_double("band", o.band);
  in_range(o.band, 0.1, 1.0, "band");
  o.confirm_intervals = r.get_int("confirm_intervals", o.confirm_intervals);
  at_least(static_cast<double>(o.confirm_intervals), 1, "confirm_intervals");
  o.cooldown_intervals = r.get_int("cooldown_intervals", o.cooldown_intervals);
  at_least(static_cast<double>(o.cooldown_intervals), 0, "cooldown_intervals");
  o.up_factor = r.get_double("up_factor", o.up_factor);
  in_range(o.up_factor, 1.01, 4.0, "up_factor");
  o.down_factor = r.get_double("down_factor", o.down_factor);
  in_range(o.down_factor, 0.25, 0.99, "down_factor");
  o.max_num_seqs_min = r.get_int("max_num_seqs_min", o.max_num_seqs_min);
  o.max_num_seqs_max = r.get_int("max_num_seqs_max", o.max_num_seqs_max);
  bounds(o.max_num_seqs_min, o.max_num_seqs_max, "max_num_seqs");
  o.max_num_batched_tokens_min = r.get_int("max_num_batched_tokens_min", o.max_num_batched_tokens_min);
  o.max_num_batched_tokens_max = r.get_int("max_num_batched_tokens_max", o.max_num_batched_tokens_max);
  bounds(o.max_num_batched_tokens_min, o.max_num_batched_tokens_max, "max_num_batched_tokens");
  o.kv_quota = r.get_bool("kv_quota", o.kv_quota);
  o.kv_high = r.get_double("kv_high", o.kv_high);
  in_range(o.kv_high, 0.05, 1.0, "kv_high");
  o.kv_low = r.get_double("kv_low", o.kv_low);
  in_range(o.kv_low, 0.0, o.kv_high, "kv_low");
  o.reserve_share = r.get_double("reserve_share", o.reserve_share);
  in_range(o.reserve_share, 0.0, 0.5, "reserve_share");
  o.long_max_share = r.get_double("long_max_share", o.long_max_share);
  in_range(o.long_max_share, 0.05, 1.0, "long_max_share");
  o.long_min_tokens = r.get_int("long_min_tokens", o.long_min_tokens);
  at_least(static_cast<double>(o.long_min_tokens), 1, "long_min_tokens");
  o.kv_quant = r.get_bool("kv_quant", o.kv_quant);
  o.batch_wait = r.get_bool("batch_wait", o.batch_wait);
  o.batch_max_wait_ms = r.get_ms("batch_max_wait_ms", o.batch_max_wait_ms, 60'000.0);
  at_least(o.batch_max_wait_ms, 0, "batch_max_wait_ms");
  o.batch_arrivals = r.get_double("batch_arrivals", o.batch_arrivals);
  at_least(o.batch_arrivals, 1, "batch_arrivals");
  return o;
}

}  // namespace optimate::optim
