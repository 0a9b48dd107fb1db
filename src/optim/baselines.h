// The baseline policies: what vLLM does with no optimizer, the row every benchmark compares
// against.
#pragma once

#include <memory>

#include "optim/api/policies.h"

namespace optimate::optim {

// First come, first served in the mechanism's queue order (preempted requests first, then by
// arrival); never preempts for a waiting request. Honours a KV quota when a controller sets one
// (optim/kv_quota.h); without one, vLLM's order exactly.
class FcfsQueuePolicy final : public QueuePolicy {
 public:
  std::string_view name() const override { return "fcfs"; }
  std::vector<int64_t> order_waiting(const SchedulerView& view) override;
};

// Admit waiting requests at every step.
class LaunchAtOncePolicy final : public BatchPolicy {
 public:
  std::string_view name() const override { return "launch-at-once"; }
  BatchDecision decide(const SchedulerView& view) override { return {}; }
};

// The most recently arrived candidate loses its KV (recomputed on resume, or swapped to host
// memory, as the engine's preemption mode decides); under a KV quota, a long generation of a
// class over its share goes first.
class RecomputeNewestPolicy final : public PreemptPolicy {
 public:
  std::string_view name() const override { return "recompute-newest"; }
  PreemptDecision choose_victim(const SchedulerView& view,
                                std::span<const int64_t> candidates) override;
  std::vector<PolicyCounter> counters() const override;

 private:
  int64_t num_victims_ = 0;
};

// Every block at the cache's configured precision.
class FullPrecisionKvPolicy final : public KvPolicy {
 public:
  std::string_view name() const override { return "full-precision-kv"; }
  kv::KvPrecision precision_for(const SchedulerView& view, const RequestView& request) override {
    return view.kv.default_precision;
  }
};

// Every kernel family on its stable variant (what the runner runs by default).
class StableKernelsPolicy final : public KernelPolicy {
 public:
  std::string_view name() const override { return "stable-kernels"; }
  KernelChoice choose(std::span<const KernelFamily> families) override { return {}; }
};

// The baseline of each slot (policy_set.h's kPolicySlots names them); a controller has none.
inline void make_baseline(std::shared_ptr<QueuePolicy>& p) { p = std::make_shared<FcfsQueuePolicy>(); }
inline void make_baseline(std::shared_ptr<BatchPolicy>& p) { p = std::make_shared<LaunchAtOncePolicy>(); }
inline void make_baseline(std::shared_ptr<PreemptPolicy>& p) { p = std::make_shared<RecomputeNewestPolicy>(); }
inline void make_baseline(std::shared_ptr<KvPolicy>& p) { p = std::make_shared<FullPrecisionKvPolicy>(); }
inline void make_baseline(std::shared_ptr<KernelPolicy>& p) { p = std::make_shared<StableKernelsPolicy>(); }
inline void make_baseline(std::shared_ptr<Controller>&) {}

}  // namespace optimate::optim
