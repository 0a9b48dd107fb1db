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

const Policy* PolicySet::at(PolicySlot slot) const {
  const Policy* out = nullptr;
  visit_slots([&](PolicySlot s, const auto& p) { if (s == slot) out = p.get(); }, *this);
  return out;
}

std::vector<const Policy*> PolicySet::all() const {
  std::vector<const Policy*> out;
  visit_slots([&](PolicySlot, const auto& p) { if (p) out.push_back(p.get()); }, *this);
  return out;
}

PolicySet PolicySet::only(PolicySlot slot) const {
  PolicySet out;
  visit_slots([&](PolicySlot s, auto& o, const auto& p) { if (s == slot) o = p; }, out, *this);
  return out;
}

PolicySet with_baselines(PolicySet set) {
  visit_slots([](PolicySlot, auto& p) { if (!p) make_baseline(p); }, set);
  return set;
}

}  // namespace optimate::optim
