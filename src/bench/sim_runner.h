// The simulated backend: a ModelRunner that computes nothing and instead advances a fake clock
// by the cost model's time for the batch it is given. The real scheduler and optimizers run
// on top of it unchanged, so policies can be compared at H200 scale on any CPU, and the same
// workload and profile always give the same report.
//
// Copies to and from the host tier take bytes / host_link_bytes_per_s on a copy engine of
// their own, one batch after another, overlapped with the steps; a step whose blocks are among
// copies not yet done starts when they are (as the CUDA runner waits on their event).
//
// A cache laid out for kv_quant (`finest`) holds the profile's KV memory in pages (kv_layout.h),
// and a static quantized cache (`quantized`: kv-cache-dtype fp8, int8 or int4) holds it in
// blocks of that precision; a step reads each block at its precision's bytes, quantized ones at
// the profile's quantized_attention_bandwidth_efficiency, and requantizing a block costs reading
// it at full precision and writing it quantized.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "runner/model_runner.h"
#include "bench/cost_model.h"
#include "core/clock.h"
#include "kv/copy_tracker.h"

namespace optimate::bench {

class SimModelRunner final : public ModelRunner {
 public:
  // `logits_vocab_size` is the width of the logits rows handed to the sampler: it only has to
  // exceed the largest prompt token id, and keeping it small keeps sampling cheap. The step
  // cost still uses the profile's vocabulary. Rows are all zero, so greedy sampling picks token
  // 0; the model has no EOS, so every request runs to max_tokens.
  // `kv_finest`: the kv_quant optimizer's precision when it is configured; the cache is then
  // laid out in pages that hold full-precision or quantized blocks, in the profile's KV memory.
  SimModelRunner(CostProfile profile, std::shared_ptr<FakeClock> clock, int64_t logits_vocab_size,
                 kv::HostTierSlots host_tier = {}, std::optional<kv::KvPrecision> finest = std::nullopt,
                 kv::Int4Keys int4_keys = kv::Int4Keys::kPerToken,
                 std::optional<kv::KvPrecision> quantized = std::nullopt);
  // The KV layout a profile gives (its bytes per element name the precision), laid out for
  // blocks down to `finest` when kv_quant is configured, or for `quantized` blocks only (a
  // static fp8, int8 or int4 cache; Error(kInvalidArgument) with kv_quant, as on the backends).
  static kv::KvLayout plan_layout(const CostProfile& profile, std::optional<kv::KvPrecision> finest = std::nullopt,
                                  kv::Int4Keys int4_keys = kv::Int4Keys::kPerToken,
                                  std::optional<kv::KvPrecision> quantized = std::nullopt);
  // Slots of `layout` in the profile's KV memory (num_kv_blocks blocks at its precision).
  static int64_t num_slots(const CostProfile& profile, const kv::KvLayout& layout);

  const ModelConfig& config() const override { return config_; }
  const KvCacheShape& kv_shape() const override { return kv_shape_; }
  // Nothing is stored; the clock advances by the bytes the conversion would move.
  void requantize(std::span<const RequantizeOp> ops) override;
  void copy_kv(std::span<const kv::KvCopy> copies) override;
  double host_link_bytes_per_s() const override { return kv_shape_.num_host_slots() > 0 ? cost_.profile().host_link_bytes_per_s : 0.0; }
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;
  // Greedy rows draw token 0 (the argmax of an all-zero row) without building the logits, as
  // a GPU backend samples on the device; a step with any other row returns false and goes
  // through forward and the host sampler.
  bool forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows,
                      std::vector<int32_t>& token_ids) override;

  const CostModel& cost_model() const { return cost_; }
  const StepCost& last_step() const { return last_; }
  // Time steps spent waiting for copies, since the start.
  double copy_wait_s() const { return static_cast<double>(copy_wait_ns_) * 1e-9; }

 private:
  CostModel cost_;
  std::shared_ptr<FakeClock> clock_;
  ModelConfig config_;
  KvCacheShape kv_shape_;
  StepCost last_;
  kv::CopyTracker copies_;
  std::map<int64_t, int64_t> copy_done_ns_;  // batches in flight: id -> when the copy engine finishes it
  int64_t copy_engine_free_ns_ = 0;
  int64_t next_copy_batch_ = 0;
  int64_t copy_wait_ns_ = 0;

  // Advances the clock by the batch's cost; returns the number of logits rows.
  size_t run(const ForwardBatch& batch);
  // Bytes of K and V of every layer one block of the code's precision holds.
  double block_bytes(int32_t code) const;
};

}  // namespace optimate::bench
