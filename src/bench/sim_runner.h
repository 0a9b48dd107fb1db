// The simulated backend: a ModelRunner that computes nothing and instead advances a fake clock
// by the cost model's time for the batch it is given. The real scheduler and optimizers run
// on top of it unchanged, so policies can be compared at H200 scale on any CPU, and the same
// workload and profile always give the same report.
#pragma once

#include <memory>
#include <vector>

#include "backend/model_runner.h"
#include "bench/cost_model.h"
#include "core/clock.h"

namespace optimate::bench {

class SimModelRunner final : public ModelRunner {
 public:
  // `logits_vocab_size` is the width of the logits rows handed to the sampler: it only has to
  // exceed the largest prompt token id, and keeping it small keeps sampling cheap. The step
  // cost still uses the profile's vocabulary. Rows are all zero, so greedy sampling picks token
  // 0; the model has no EOS, so every request runs to max_tokens.
  SimModelRunner(CostProfile profile, std::shared_ptr<FakeClock> clock, int64_t logits_vocab_size);

  const ModelConfig& config() const override { return config_; }
  const KvCacheShape& kv_shape() const override { return kv_shape_; }
  // Nothing is stored, so requantizing costs nothing here (the cost model has no term for it).
  void requantize(std::span<const RequantizeOp>) override {}
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;
  // Greedy rows draw token 0 (the argmax of an all-zero row) without building the logits, as
  // a GPU backend samples on the device; a step with any other row returns false and goes
  // through forward and the host sampler.
  bool forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows,
                      std::vector<int32_t>& token_ids) override;

  const CostModel& cost_model() const { return cost_; }
  const StepCost& last_step() const { return last_; }

 private:
  CostModel cost_;
  std::shared_ptr<FakeClock> clock_;
  ModelConfig config_;
  KvCacheShape kv_shape_;
  StepCost last_;

  // Advances the clock by the batch's cost; returns the number of logits rows.
  size_t run(const ForwardBatch& batch);
};

}  // namespace optimate::bench
