// The policies one engine runs with: one per slot, shared pointers so the engine can swap a
// slot between steps while the scheduler keeps the same object for a whole step.
//
// The slots are data: kPolicySlots (name, baseline, whether its policy shapes how a step runs)
// and visit_slots (the PolicySet member of each) are the only places that list them. Merging
// optimizers, filling baselines, guarding policies and the engine's OptimizerSet all go through
// them, so a new slot is a row here, its interface in policies.h, its baseline (baselines.h)
// and its guard (engine/policy_guard.cpp).
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include "optim/api/policies.h"

namespace optimate::optim {

enum class PolicySlot { kQueue, kBatch, kPreempt, kKv, kKernels, kController };

struct PolicySlotInfo {
  PolicySlot slot;
  std::string_view name;      // in errors and logs: "optimizers 'a' and 'b' both set the queue policy"
  std::string_view baseline;  // the registry name of the slot's baseline; empty: none (no controller runs)
  std::string_view baseline_description;
  // Its policy changes how a step runs (its KV precision, its kernels), so the throughput guard
  // watches the steps while an optimizer fills it.
  bool shapes_steps = false;
};

inline constexpr std::array<PolicySlotInfo, 6> kPolicySlots = {{
    {PolicySlot::kQueue, "queue", "fcfs", "first come, first served admission (baseline)", false},
    {PolicySlot::kBatch, "batch", "launch-at-once", "admit waiting requests every step (baseline)", false},
    {PolicySlot::kPreempt, "preempt", "recompute-newest",
     "preempt the newest request, recompute it on resume (baseline)", false},
    {PolicySlot::kKv, "KV", "full-precision-kv", "every KV block at the cache dtype (baseline)", true},
    {PolicySlot::kKernels, "kernels", "stable-kernels",
     "every kernel family on the runner's stable variant (baseline)", true},
    {PolicySlot::kController, "controller", "", "", false},
}};
inline constexpr size_t kNumPolicySlots = kPolicySlots.size();

inline const PolicySlotInfo& slot_info(PolicySlot slot) { return kPolicySlots[static_cast<size_t>(slot)]; }

struct PolicySet {
  std::shared_ptr<QueuePolicy> queue;
  std::shared_ptr<BatchPolicy> batch;
  std::shared_ptr<PreemptPolicy> preempt;
  std::shared_ptr<KvPolicy> kv;
  std::shared_ptr<KernelPolicy> kernels;
  std::shared_ptr<Controller> controller;  // none in the baseline

  // The policy in a slot, or null.
  const Policy* at(PolicySlot slot) const;
  // Every policy present, in slot order, for counters and logs.
  std::vector<const Policy*> all() const;
  // A set holding this one's policy in `slot` and nothing else.
  PolicySet only(PolicySlot slot) const;
};

// Calls f(slot, sets.member...) for every slot in PolicySlot order, with the member of that slot
// of each set: visit_slots(f, merged, one) pairs the two sets' policies slot by slot.
template <typename F, typename... Sets>
void visit_slots(F&& f, Sets&&... sets) {
  f(PolicySlot::kQueue, sets.queue...);
  f(PolicySlot::kBatch, sets.batch...);
  f(PolicySlot::kPreempt, sets.preempt...);
  f(PolicySlot::kKv, sets.kv...);
  f(PolicySlot::kKernels, sets.kernels...);
  f(PolicySlot::kController, sets.controller...);
}

// Fills empty slots (except the controller) with the baselines of kPolicySlots.
PolicySet with_baselines(PolicySet set);

}  // namespace optimate::optim
