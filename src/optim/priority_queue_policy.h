// Priority scheduling (the seed's section 3.1.1), done as a queue policy plus a victim policy.
//
// Admission order: strict by level, so a less important class never overtakes a more
// important one's waiting requests however long an overload lasts. Inside a level, by
// priority value plus waiting time / aging_ms (aging never crosses levels), then older first.
// The starvation bound: a request waiting past its level's max_wait_ms for its first admission
// goes to the front (earliest deadline first), but such jumps ahead of more important
// waiting requests take at most overdue_share of admissions. A preempted request keeps its
// original arrival time, so it goes back to its old place among its level.
//
// Preemption: when the head of that order is blocked (no sequence slot, or too few KV blocks),
// the least important running request of a strictly lower level is preempted for it, unless it
// was admitted less than min_run_ms ago (bounds thrash) or was admitted past its deadline (the
// bound would mean nothing if it could be evicted again). For KV, only when the candidates'
// blocks can make room, so nothing is preempted in vain.
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "optim/api/policies.h"
#include "optim/priority_levels.h"

namespace optimate::optim {

class PriorityQueuePolicy final : public QueuePolicy {
 public:
  explicit PriorityQueuePolicy(PriorityOptions options);
  std::string_view name() const override { return "priority"; }
  std::vector<int64_t> order_waiting(const SchedulerView& view) override;
  std::optional<int64_t> preempt_for(const SchedulerView& view, int64_t waiting_index,
                                     BlockedOn blocked_on) override;
  // preemptions_for_max_num_seqs, preemptions_for_kv_blocks, preemptions_refused_min_run,
  // max_wait_reached (requests that hit their deadline), overdue_admissions (admitted ahead of
  // more important waiting requests), admissions, kv_quota_holds (requests a controller's KV
  // quota kept waiting, counted per decision), kv_footprint_holds (those the footprint kept
  // waiting: kv_quant's while it protects an important class), and per level: waiting.<name>,
  // oldest_wait_ms.<name> (as of the last decision).
  std::vector<PolicyCounter> counters() const override;

  const PriorityOptions& options() const { return options_; }

 private:
  // Inside a level: the priority value plus waiting time / aging_ms.
  double aged_priority(const RequestView& r, int64_t now_ns) const;
  bool overdue(const RequestView& r, int64_t now_ns) const;
  // Counts the requests that left the queue since the last call (admitted, or aborted), and
  // whether the last jump was among them.
  void observe_admissions(const SchedulerView& view);

  PriorityOptions options_;
  int64_t preempted_for_slots_ = 0;
  int64_t preempted_for_kv_ = 0;
  int64_t refused_min_run_ = 0;
  int64_t deferred_ = 0;        // KV-blocked preemptions asked for before preempt_after_ms
  int64_t max_wait_reached_ = 0;
  std::unordered_set<int64_t> overdue_seen_;  // seq ids already counted in max_wait_reached_
  std::unordered_set<int64_t> known_waiting_;  // waiting seq ids as of the last call
  int64_t jump_seq_ = -1;                      // put ahead of more important ones last call
  int64_t num_admissions_ = 0;
  int64_t num_overdue_admissions_ = 0;
  int64_t kv_quota_holds_ = 0;
  int64_t kv_footprint_holds_ = 0;
  // overdue_share per admission, at most one jump's worth: jumps never come in a burst after
  // a quiet spell.
  double jump_credit_ = 1.0;
  std::vector<int64_t> waiting_by_level_;
  std::vector<double> oldest_wait_ms_by_level_;
};

// When the pool runs dry during a step, the least important running candidate (newest first
// among equals) gives its blocks back; recently admitted ones only if nothing else can. Under a
// KV quota, a long generation of a class over its share goes first.
class PriorityVictimPolicy final : public PreemptPolicy {
 public:
  explicit PriorityVictimPolicy(PriorityOptions options) : options_(std::move(options)) {}
  std::string_view name() const override { return "priority-victims"; }
  PreemptDecision choose_victim(const SchedulerView& view,
                                std::span<const int64_t> candidates) override;
  std::vector<PolicyCounter> counters() const override;

 private:
  PriorityOptions options_;
  int64_t num_victims_ = 0;
  int64_t num_protected_victims_ = 0;  // only recently admitted candidates were left
  int64_t num_quota_victims_ = 0;      // long generations of a class over its KV share
};

}  // namespace optimate::optim
