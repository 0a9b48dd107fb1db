// A ModelRunner decorator that times each forward on the engine's clock and counts its batch,
// so the benchmark can plot batch sizes and busy time for any backend (real or simulated).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>

#include "runner/model_runner.h"
#include "core/clock.h"

namespace optimate::bench {

struct ForwardObservation {
  int64_t batch_size = 0;  // sequences
  int64_t num_tokens = 0;
  double duration_s = 0.0;
  int64_t count = 0;       // forwards so far
};

class ObservedRunner final : public ModelRunner {
 public:
  // `clock` must outlive the runner.
  ObservedRunner(std::unique_ptr<ModelRunner> inner, std::shared_ptr<const Clock> clock)
      : inner_(std::move(inner)), clock_(std::move(clock)) {}

  const ModelConfig& config() const override { return inner_->config(); }
  const KvCacheShape& kv_shape() const override { return inner_->kv_shape(); }
  std::vector<KernelFamily> kernel_families() const override { return inner_->kernel_families(); }
  void set_kernel_variant(std::string_view family, std::string_view variant) override {
    inner_->set_kernel_variant(family, variant);
  }
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override {
    const int64_t start = clock_->now_ns();
    inner_->forward(batch, logits);
    observe(batch, start);
  }
  bool forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows,
                      std::vector<int32_t>& token_ids) override {
    const int64_t start = clock_->now_ns();
    if (!inner_->forward_sample(batch, rows, token_ids)) return false;
    observe(batch, start);
    return true;
  }
  // A launched step is observed when it is collected: from its launch, or from when the step
  // before it was collected if that came later (it ran on the device only after that one).
  bool launch_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows) override {
    const int64_t start = clock_->now_ns();
    if (!inner_->launch_sample(batch, rows)) return false;
    launched_.push_back({start, shape_of(batch)});
    return true;
  }
  void collect_sample(std::vector<int32_t>& token_ids) override {
    inner_->collect_sample(token_ids);
    if (launched_.empty()) return;
    const Launched l = launched_.front();
    launched_.pop_front();
    record(l.shape, std::max(l.start_ns, last_end_ns_));
  }
  int64_t weight_bytes() const override { return inner_->weight_bytes(); }
  void time_next_step_by_stage() override { inner_->time_next_step_by_stage(); }
  bool last_step_device_times(StepDeviceTimes& out) const override { return inner_->last_step_device_times(out); }
  StepCapacity capacity() const override { return inner_->capacity(); }
  void requantize(std::span<const RequantizeOp> ops) override { inner_->requantize(ops); }
  void copy_kv(std::span<const kv::KvCopy> copies) override {
    inner_->copy_kv(copies);
    if (!copies.empty()) ++num_copy_batches_;
  }
  // Steps that copied blocks to or from the host tier (a step may copy and run nothing).
  int64_t num_copy_batches() const { return num_copy_batches_; }
  double host_link_bytes_per_s() const override { return inner_->host_link_bytes_per_s(); }
  const ForwardObservation& last() const { return last_; }

 private:
  struct Shape {
    int64_t batch_size = 0, num_tokens = 0;
  };
  struct Launched {
    int64_t start_ns = 0;
    Shape shape;
  };
  static Shape shape_of(const ForwardBatch& batch) {
    Shape s{static_cast<int64_t>(batch.seqs.size()), 0};
    for (const SeqSlice& slice : batch.seqs) s.num_tokens += static_cast<int64_t>(slice.token_ids.size());
    return s;
  }
  void observe(const ForwardBatch& batch, int64_t start_ns) { record(shape_of(batch), start_ns); }
  void record(const Shape& shape, int64_t start_ns) {
    last_end_ns_ = clock_->now_ns();
    last_.duration_s = static_cast<double>(last_end_ns_ - start_ns) * 1e-9;
    last_.batch_size = shape.batch_size;
    last_.num_tokens = shape.num_tokens;
    ++last_.count;
  }

  std::deque<Launched> launched_;
  int64_t last_end_ns_ = 0;
  std::unique_ptr<ModelRunner> inner_;
  std::shared_ptr<const Clock> clock_;
  ForwardObservation last_;
  int64_t num_copy_batches_ = 0;
};

}  // namespace optimate::bench
