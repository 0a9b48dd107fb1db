// The boundary between the engine and a compute backend: run one forward step over a batch of
// sequence slices whose KV lives in a paged cache (runner/step_batch.h), and return logits for
// the rows asked for. The CPU and CUDA backends implement it, and so does the tensor-parallel
// driver (parallel/tp_runner.h), which puts rank runners behind one.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/kernel_family.h"
#include "model/model_config.h"
#include "runner/step_batch.h"

namespace optimate {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const ModelConfig& config() const = 0;
  virtual const KvCacheShape& kv_shape() const = 0;
  // Runs the batch, writes K/V of every token into the cache, and fills `logits` with
  // config().vocab_size floats per row: one row per slice with want_logits (token_ids.size()
  // rows for one with all_logits), in slice order.
  virtual void forward(const ForwardBatch& batch, std::vector<float>& logits) = 0;
  // Requantizes blocks before the next forward (the kv_quant optimizer), each from its slot into
  // the op's (the same slot or a free one of another page; kv/kv_format.h). Runners whose
  // layout holds only one precision (kv_shape().layout.dynamic() false) never get ops.
  virtual void requantize(std::span<const RequantizeOp> ops) = 0;
  // Copies blocks between the device arenas and the host tier, after requantize and before the
  // next forward, in the order given (kv/kv_copy.h). A runner may overlap them with its next
  // steps, as long as a step that touches a copied block sees the copy done. A runner without
  // a host tier (kv_shape().num_host_slots() 0) never gets copies; this default refuses any.
  virtual void copy_kv(std::span<const kv::KvCopy> copies) {
    kv::check_copies(copies, kv_shape().num_blocks, /*host_slots=*/0);
  }
  // Bytes per second between the device arenas and the host tier, measured when the runner
  // was built; 0 without a host tier.
  virtual double host_link_bytes_per_s() const { return 0.0; }
  // Backends that sample on the device run the batch and draw one token per logits row (rows
  // in slice order, one spec each), so no logits cross to the host. The engine calls it only
  // for rows without penalties, suppressed ids or logprobs, and never with all_logits slices. False, having run nothing, when
  // the backend cannot; the engine then calls forward and samples on the host.
  virtual bool forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows,
                              std::vector<int32_t>& token_ids) {
    return false;
  }
  // The same step launched without waiting for it (the overlap of host and device): the
  // tokens come from collect_sample(), in launch order, and the host may plan and launch the
  // next step meanwhile. A token id token_from_last_launch(k) in a slice stands for the token
  // drawn for row k of the launch just before this one; the runner takes it on the device, so
  // the step runs after that one there. At most two launches are uncollected at a time;
  // forward() and forward_sample() may only run once every launch is collected. The same
  // rows as forward_sample; false, having run nothing, when the runner cannot launch ahead at
  // all (an answer that never changes: the engine then runs every step synchronously).
  virtual bool launch_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows) { return false; }
  // The tokens of the oldest uncollected launch, waiting for them.
  // The engine calls it only after a launch_sample that returned true.
  virtual void collect_sample(std::vector<int32_t>& token_ids) { token_ids.clear(); }
  // What one step may hold; unbounded by default (the CPU runner sizes its buffers per step).
  virtual StepCapacity capacity() const { return {}; }
  // Bytes of the weights as the runner holds them (the embedding table included), or 0 when
  // the runner holds none (a simulation).
  virtual int64_t weight_bytes() const { return 0; }
  // Asks for the next step to be timed by stage (a step so timed may run slower: a GPU runner
  // records an event per stage and launches it eagerly). Runners that cannot ignore it.
  virtual void time_next_step_by_stage() {}
  // The kernel families the runner switches between at run time (core/kernel_family.h), each
  // on its stable variant until set_kernel_variant says otherwise; none by default.
  virtual std::vector<KernelFamily> kernel_families() const { return {}; }
  // Runs `variant` of `family` from the next step on. Error(kInvalidArgument) for a family or a
  // variant kernel_families() does not list.
  virtual void set_kernel_variant(std::string_view family, std::string_view variant) {
    fail_unknown_kernel_family(family);
  }
  // What the runner measured of its last forward (or last collected launch); false when it measures nothing (the CPU
  // runner, whose steps are the host's time).
  virtual bool last_step_device_times(StepDeviceTimes& out) const { return false; }
};

}  // namespace optimate
