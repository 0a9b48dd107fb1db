// Dynamic KV-cache quantization (the seed's section 3.2.1, DynamicKVCacheQuantOptimizer):
// while the cache is short of memory, the blocks of requests that can afford it are stored
// quantized, chosen block by block at run time.
//
// Hysteresis: it turns on when the cache's used share reaches activation_threshold and off
// when it falls below deactivation_threshold. While on:
//   - new blocks of eligible requests are allocated at `bits` (fp8, int8 or int4);
//   - full-precision blocks already written are requantized in place, the least important
//     requests first (lowest priority, then the newest, which have the most left to run), each
//     request's oldest blocks first, at most max_blocks_per_step a step, so requantizing frees
//     pages for waiting requests without one step paying for all of it.
// Never quantized: requests at or above full_precision_min_priority when priority_aware (they
// run exactly as without the optimizer, prefix hits included), the first keep_first_tokens of
// a sequence (attention sinks) and its newest keep_recent_tokens.
//
// A controller may set PolicyKnobs::kv_quant_precision: then the policy is on at that
// precision whatever the usage (adaptive strengthens it under memory pressure), and back on its
// own thresholds and `bits` when the knob is cleared.
#pragma once

#include <cstdint>
#include <optional>

#include "config/optimizer_options.h"
#include "core/priority_order.h"
#include "kv/kv_precision.h"
#include "optim/api/policies.h"

namespace optimate::optim {

class OptionReader;

struct KvQuantOptions {
  kv::KvPrecision precision = kv::KvPrecision::kInt8;  // `bits`: 8, 4 or "fp8"
  double activation_threshold = 0.8;
  double deactivation_threshold = 0.7;
  bool priority_aware = true;
  // In the engine's convention (larger is more important); read in the clients'.
  int64_t full_precision_min_priority = 1;
  int64_t keep_recent_tokens = 64;
  int64_t keep_first_tokens = 16;
  int64_t max_blocks_per_step = 256;

  static KvQuantOptions read(OptionReader& reader, PriorityOrder order);
};

// The precision the cache must be laid out for when `spec` configures kv_quant (enabled or
// not), so it can be turned on at run time; nullopt for other optimizers.
std::optional<kv::KvPrecision> kv_quant_layout_precision(const OptimizerSpec& spec);

class KvQuantPolicy final : public KvPolicy {
 public:
  explicit KvQuantPolicy(KvQuantOptions options) : options_(options) {}
  std::string_view name() const override { return "kv_quant"; }
  kv::KvPrecision precision_for(const SchedulerView& view, const RequestView& request) override;
  std::vector<RequantizeOrder> requantize(const SchedulerView& view) override;
  // active (0/1), activations, quantized_allocations (blocks allocated quantized: requests
  // admitted or grown while active), requantize_orders (blocks asked for).
  std::vector<PolicyCounter> counters() const override;

  bool active() const { return active_; }

 private:
  void observe(const SchedulerView& view);
  // The precision to quantize at now (the controller's knob first); nullopt: off.
  std::optional<kv::KvPrecision> quantize_to(const SchedulerView& view);
  bool eligible(const RequestView& r) const;

  KvQuantOptions options_;
  bool active_ = false;
  int64_t last_now_ns_ = -1;
  int64_t activations_ = 0;
  int64_t quantized_allocations_ = 0;
  int64_t requantize_orders_ = 0;
};

}  // namespace optimate::optim
