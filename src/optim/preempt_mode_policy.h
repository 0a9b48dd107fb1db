// How a preempted request gives its KV blocks back (the engine's --preemption-mode): recompute
// (drop them, compute the tokens again on resume), swap (copy them to host memory and back), or
// auto, chosen per victim by cost:
//
//   swap      2 x bytes / host-link bandwidth (out, then back in) + a step (the mean step
//             time: a swapped-in request runs the step after its blocks were copied back)
//   recompute tokens to compute again x measured time per prefill token: with prefix caching
//             on, only those past its last full block (the full blocks stay cached and the
//             resumption hits them; if the pool evicts them first, into the host tier when there
//             is one, they are computed or copied back then)
//
// Both grow with the prefix, but the swap's step does not: a prefix whose recomputation costs
// less than a step plus the copies recomputes, a longer one swaps. Before any prefill step was
// measured (or without a host-link bandwidth), auto recomputes. The choice and its figures go to the debug log; the scheduler counts
// preemptions by mode and reason.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "core/setting_choices.h"  // PreemptionMode
#include "optim/api/policies.h"

namespace optimate::optim {

struct PreemptCost {
  int64_t recompute_tokens = 0;
  double swap_ns = 0.0;
  double recompute_ns = 0.0;
};

// The estimate auto compares (swap_ns infinite without bandwidth, recompute_ns 0 without a
// measured rate).
PreemptCost preempt_cost(const SchedulerView& view, const RequestView& victim);

class CostPreemptModePolicy final : public PreemptModePolicy {
 public:
  explicit CostPreemptModePolicy(PreemptionMode setting) : setting_(setting) {}
  std::string_view name() const override { return "preemption-mode"; }
  PreemptModeChoice choose_mode(const SchedulerView& view, const RequestView& victim) override;
  // swap_choices, recompute_choices.
  std::vector<PolicyCounter> counters() const override;

  PreemptionMode setting() const { return setting_; }

 private:
  PreemptionMode setting_;
  int64_t num_swap_ = 0;
  int64_t num_recompute_ = 0;
};

}  // namespace optimate::optim
