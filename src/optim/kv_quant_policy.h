// Dynamic KV-cache quantization (the seed's section 3.2.1, DynamicKVCacheQuantOptimizer):
// while the cache is short of memory, the blocks of requests that can afford it are stored
// quantized, chosen block by block at run time.
//
// Hysteresis: it turns on when the cache's used share reaches activation_threshold and off
// when it falls below deactivation_threshold. While on, full-precision blocks already written
// are requantized in place to `bits` (fp8, int8 or int4): the least important requests first
// (lowest priority, then the newest, which have the most left to run), each request's oldest
// blocks first, at most max_blocks_per_step a step, so requantizing frees pages for waiting
// requests without one step paying for all of it. int4 blocks scale their keys per token (a
// (scale, min) pair per 64 elements of a row) or, with int4_keys = "channel", per channel over
// the block (KIVI), which halves the quality cost for a third fewer int4 blocks a page
// (kv/kv_layout.h; the CPU backend only).
//
// Never quantized: requests at or above full_precision_min_priority when priority_aware (they
// run exactly as without the optimizer, prefix hits included), and any block that holds one of
// a sequence's first keep_first_tokens (attention sinks) or one of its newest
// keep_recent_tokens. New blocks always hold the newest tokens, so every block is allocated
// at full precision and requantized only once all its tokens are computed and it has left
// both windows (KIVI's full-precision residual; per-channel int4 keys need the whole block).
//
// protect_priority (with priority_aware): while a request of the full-precision class runs,
// blocks are requantized only when a request of that class waits or the running sequences'
// next blocks would not fit; the freed room then serves the important class, not a bigger
// batch of the others, whose longer steps the important requests would pay for.
//
// A controller may set PolicyKnobs::kv_quant_precision: then the policy is on at that
// precision whatever the usage (adaptive strengthens it under memory pressure), and back on its
// own thresholds and `bits` when the knob is cleared.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "config/optimizer_options.h"
#include "core/priority_order.h"
#include "kv/kv_format.h"
#include "kv/kv_precision.h"
#include "optim/api/policies.h"

namespace optimate::optim {

class OptionReader;

struct KvQuantOptions {
  kv::KvPrecision precision = kv::KvPrecision::kInt8;  // `bits`: 8, 4 or "fp8"
  kv::Int4Keys int4_keys = kv::Int4Keys::kPerToken;    // `int4_keys`: "token" or "channel"
  double activation_threshold = 0.8;
  double deactivation_threshold = 0.7;
  bool priority_aware = true;
  // Read in the clients' convention.
  EnginePriority full_precision_min_priority{1};
  int64_t keep_recent_tokens = 64;
  int64_t keep_first_tokens = 16;
  int64_t max_blocks_per_step = 256;
  bool protect_priority = true;
  // Perplexity change of a cache stored wholly at each precision (0.01 = +1%), as
  // `optimate perplexity` measures it for the served model; the quality estimate of a mix is
  // their average weighted by the blocks at each precision. Defaults: SmolLM2-135M's under
  // kv_quant (its windows kept), the larger of the two texts in docs/benchmarks.md.
  double quality_fp8 = 0.0014;
  double quality_int8 = 0.0002;
  double quality_int4 = 0.0075;

  static KvQuantOptions read(OptionReader& reader, PriorityOrder order);
};

// What the configured optimizers need of the KV cache's layout at start: when kv_quant is
// configured (enabled or not, so it can be turned on at run time), the finest precision it
// may requantize to and how int4 blocks scale their keys. Every backend and the simulator
// lay their cache out from this.
struct KvLayoutRequest {
  std::optional<kv::KvPrecision> finest;  // nullopt: a cache of one precision
  kv::Int4Keys int4_keys = kv::Int4Keys::kPerToken;
};
KvLayoutRequest kv_layout_request(std::span<const OptimizerSpec> specs);

class KvQuantPolicy final : public KvPolicy {
 public:
  explicit KvQuantPolicy(KvQuantOptions options) : options_(options) {}
  std::string_view name() const override { return "kv_quant"; }
  kv::KvPrecision precision_for(const SchedulerView& view, const RequestView& request) override;
  std::vector<RequantizeOrder> requantize(const SchedulerView& view) override;
  // With protect_priority, while a request of the important class runs or waits (and the
  // policy is on or quantized blocks are in use): a less important request is admitted only
  // while the blocks in use, each counted once whatever its precision, and its own stay within
  // what the cache holds at full precision. The batch then is never bigger than without the
  // optimizer, so neither are the important requests' steps; the room quantizing frees goes to
  // them and to the running sequences' growth.
  std::optional<Footprint> admission_footprint(const SchedulerView& view) override;
  // active (0/1), activations, requantize_orders (blocks asked for), held_for_priority (steps
  // it requantized nothing because only less important requests would gain), quality_estimate
  // (the perplexity change the cache's mix of precisions, once the last orders are applied, is
  // estimated to cost).
  std::vector<PolicyCounter> counters() const override;

  bool active() const { return active_; }
  // The perplexity change the blocks in use are estimated to cost (quality_* weighted by the
  // blocks at each precision; 0 with every block at full precision).
  double quality_estimate(const KvView& kv) const;

 private:
  void observe(const SchedulerView& view);
  // The precision to quantize at now (the controller's knob first); nullopt: off.
  std::optional<kv::KvPrecision> quantize_to(const SchedulerView& view);
  bool eligible(const RequestView& r) const;
  // With protect_priority: whether freeing room now would serve the important class (or keep
  // the running sequences from being preempted).
  bool room_serves_priority(const SchedulerView& view) const;
  bool protecting(const SchedulerView& view) const;
  // The written blocks of eligible requests outside both windows, least important first.
  std::vector<RequantizeOrder> requantize_orders(const SchedulerView& view, kv::KvPrecision precision);

  KvQuantOptions options_;
  bool active_ = false;
  int64_t last_now_ns_ = -1;
  int64_t activations_ = 0;
  int64_t requantize_orders_ = 0;
  int64_t held_for_priority_ = 0;
  double quality_estimate_ = 0.0;
};

}  // namespace optimate::optim
