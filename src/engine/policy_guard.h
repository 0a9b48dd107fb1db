// Guards around every policy the scheduler calls. A guard
//   - times each call on the policies' own clock (optimate:optimizer_seconds_total),
//   - catches a policy that throws or returns an impossible decision (an index outside the
//     queue, a victim that is not a candidate) and answers that call with the baseline's
//     decision instead, so the step goes on,
//   - trips a watchdog when a policy's calls take longer than watchdog_ms several times in a
//     row,
//   - records preemptions and batch holds in the decision log with their reasons.
// A fault is noted on the optimizer's OptimizerHealth; between steps the engine disables that
// optimizer (OptimizerSet::take_faults), so the baseline runs its slots from then on.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/priority_order.h"
#include "engine/decision_log.h"
#include "optim/api/policy_set.h"

namespace optimate {

using optim::PolicySlot;

enum class FallbackReason { kError, kStepFailure, kWatchdog, kThroughput, kController, kKernelFault };
// "error", "step_failure", "watchdog", "throughput", "controller", "kernel_fault" (a chosen kernel
// gave non-finite logits or a token outside the vocabulary): the label of
// optimate:optimizer_fallbacks_total.
std::string_view fallback_reason_name(FallbackReason reason);

struct PolicyFault {
  FallbackReason reason = FallbackReason::kError;
  std::string detail;
};

// One optimizer's record across the policies it fills (a baseline's too).
struct OptimizerHealth {
  std::string optimizer;
  bool baseline = false;
  double seconds_total = 0.0;  // inside its policies, on the policies' clock
  int64_t num_calls = 0;
  int64_t slow_calls_in_a_row = 0;
  std::optional<PolicyFault> fault;  // set by a guard, taken by the engine between steps
};

// Shared by every guard of one engine.
struct GuardContext {
  std::shared_ptr<const Clock> clock;  // the policies' own time: the steady clock by default
  std::shared_ptr<const Clock> engine_clock;  // timestamps of decision records
  double watchdog_ms = 0.0;           // 0: off
  int64_t watchdog_calls = 3;         // calls in a row over watchdog_ms that trip it
  std::shared_ptr<DecisionLog> decisions;  // null: no decision log
  PriorityOrder priority_order = PriorityOrder::kHigherFirst;  // how records show priorities
  // Whose policy ran last: the suspect when a step fails right after a decision.
  std::shared_ptr<OptimizerHealth> last_called;
};

// `set`'s policies wrapped in guards charging `health`; `fallback` answers a call that failed
// (null for the baselines themselves, whose errors propagate).
optim::PolicySet guard_policies(const optim::PolicySet& set, const std::shared_ptr<OptimizerHealth>& health,
                                const optim::PolicySet* fallback, const std::shared_ptr<GuardContext>& context);

}  // namespace optimate
