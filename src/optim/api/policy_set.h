// The policies one engine runs with: one per slot, shared pointers so the engine can swap a
// slot between steps while the scheduler keeps the same object for a whole step.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "optim/api/policies.h"

namespace optimate::optim {

struct PolicySet {
  std::shared_ptr<QueuePolicy> queue;
  std::shared_ptr<BatchPolicy> batch;
  std::shared_ptr<PreemptPolicy> preempt;
  std::shared_ptr<KvPolicy> kv;
  std::shared_ptr<SamplerPolicy> sampler;
  std::shared_ptr<Controller> controller;  // none in the baseline

  // Every policy present, for counters and logs.
  std::vector<const Policy*> all() const;
};

// Fills empty slots (except the controller) with the baselines: FCFS, launch at once,
// recompute the newest, full-precision KV, unfused sampling.
PolicySet with_baselines(PolicySet set);

}  // namespace optimate::optim
