// The engine's side of the kernels slot: the policy's choice onto the runner, and the watch over
// a variant other than a family's stable one (engine/kernel_guard.h): a step it ran badly runs
// again on the stable kernels after the optimizer that chose it falls back.
#include <vector>

#include "core/error.h"
#include "core/logging.h"
#include "engine/engine.h"

namespace optimate {

void Engine::check_kernels(const std::vector<OptimizerSpec>& specs) const {
  const optim::PolicySet set = optimizers_->validate(specs);
  if (!set.kernels) return;
  if (const std::string problem = kernels_->check(set.kernels->choose(kernels_->families())); !problem.empty())
    fail(ErrorCode::kInvalidArgument, "optimizers.{}: {}", set.kernels->name(), problem);
}

void Engine::apply_kernels() {
  const bool was_watching = kernels_->watching();
  // The guarded policy answers an impossible choice with the baseline's (and falls back).
  kernels_->apply(scheduler_->policies().kernels->choose(kernels_->families()));
  if (kernels_->watching()) spdlog::info("kernels: {} (watched; the stable variants are the fallback)", kernels_->describe());
  else if (was_watching) spdlog::info("kernels: every family on its stable variant");
}

void Engine::run_step(const sched::StepPlan& plan, const ForwardBatch& batch, sched::StepResult& result) {
  if (kernels_->families().empty()) return run_once(plan, batch, result);
  int64_t num_tokens = 0;
  for (const SeqSlice& s : batch.seqs) num_tokens += static_cast<int64_t>(s.token_ids.size());
  const int64_t vocab = runner_->config().vocab_size;
  std::vector<int32_t> tokens;
  for (;;) {
    kernels_->begin_step(step_kind(batch), num_tokens);
    const int64_t start_ns = clock_->now_ns();
    run_once(plan, batch, result);
    tokens.clear();
    for (const sched::SampledToken& t : result.tokens) tokens.push_back(t.token_id);
    const int64_t num_rows = static_cast<int64_t>(logits_.size()) / vocab;
    std::string fault = kernels_->check_outputs(logits_, num_rows, tokens, vocab);
    const std::string owner = optimizers_->owner(PolicySlot::kKernels);  // a copy: a fallback clears the slot
    if (!fault.empty() && !owner.empty()) {
      fall_back(owner, FallbackReason::kKernelFault, fault);
      continue;  // the same step on the stable kernels: no request loses its token
    }
    StepDeviceTimes times;
    const double seconds = runner_->last_step_device_times(times) ? times.busy_s
                                                                  : static_cast<double>(clock_->now_ns() - start_ns) * 1e-9;
    fault = kernels_->end_step(seconds, config_.optimizer_min_throughput_ratio);
    if (!fault.empty() && !owner.empty()) fall_back(owner, FallbackReason::kThroughput, fault);
    return;
  }
}

}  // namespace optimate
