#include "optim/baselines.h"

#include <numeric>

#include "core/error.h"
#include "optim/api/policy_set.h"
#include "optim/kv_quota.h"

namespace optimate::optim {

std::vector<int64_t> FcfsQueuePolicy::order_waiting(const SchedulerView& view) {
  std::vector<int64_t> order(view.waiting.size());
  std::iota(order.begin(), order.end(), 0);
  return apply_kv_quota(view, std::move(order));
}

PreemptDecision RecomputeNewestPolicy::choose_victim(const SchedulerView& view,
                                                     std::span<const int64_t> candidates) {
  OPTIMATE_CHECK(!candidates.empty(), "no preemption candidates");
  ++num_victims_;
  // A long generation of a class over its KV share goes first (a controller's quota).
  if (const std::optional<int64_t> over = over_share_victim(view, candidates)) return {*over};
  int64_t best = candidates.front();
  for (int64_t i : candidates) {
    const RequestView& r = view.running[i];
    const RequestView& b = view.running[best];
    // Newest arrival; among equals (n > 1 siblings) the later sequence.
    if (r.arrival_ns > b.arrival_ns || (r.arrival_ns == b.arrival_ns && r.seq_id > b.seq_id))
      best = i;
  }
  return {best};
}

std::vector<PolicyCounter> RecomputeNewestPolicy::counters() const {
  return {{"victims", static_cast<double>(num_victims_)}};
}

std::vector<const Policy*> PolicySet::all() const {
  std::vector<const Policy*> out;
  for (const Policy* p : {static_cast<const Policy*>(queue.get()), static_cast<const Policy*>(batch.get()),
                          static_cast<const Policy*>(preempt.get()), static_cast<const Policy*>(kv.get()),
                          static_cast<const Policy*>(sampler.get()),
                          static_cast<const Policy*>(controller.get())})
    if (p) out.push_back(p);
  return out;
}

PolicySet with_baselines(PolicySet set) {
  if (!set.queue) set.queue = std::make_shared<FcfsQueuePolicy>();
  if (!set.batch) set.batch = std::make_shared<LaunchAtOncePolicy>();
  if (!set.preempt) set.preempt = std::make_shared<RecomputeNewestPolicy>();
  if (!set.kv) set.kv = std::make_shared<FullPrecisionKvPolicy>();
  if (!set.sampler) set.sampler = std::make_shared<UnfusedSamplerPolicy>();
  return set;
}

}  // namespace optimate::optim
