// Priority scheduling (the seed's section 3.1.1), done as a queue policy plus a victim policy.
//
// Admission order: requests past their level's max_wait_ms (never admitted yet) first, earliest
// deadline first; then by effective level (base level + waiting time / aging_ms, capped at the
// top level), older first among equals. A preempted request keeps its original arrival time,
// so it goes back to its old place among its level instead of the back of the queue.
//
// Preemption: when the head of that order is blocked (no sequence slot, or too few KV blocks),
// the least important running request of a strictly lower base level is preempted for it,
// unless it was admitted less than min_run_ms ago (bounds thrash). For KV, only when the
// candidates' blocks can make room, so nothing is preempted in vain.
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
  // max_wait_reached (requests that hit their deadline), and per level: waiting.<name>,
  // oldest_wait_ms.<name> (as of the last decision).
  std::vector<PolicyCounter> counters() const override;

  const PriorityOptions& options() const { return options_; }

 private:
  double effective_level(const RequestView& r, int64_t now_ns) const;
  bool overdue(const RequestView& r, int64_t now_ns) const;

  PriorityOptions options_;
  int64_t preempted_for_slots_ = 0;
  int64_t preempted_for_kv_ = 0;
  int64_t refused_min_run_ = 0;
  int64_t max_wait_reached_ = 0;
  std::unordered_set<int64_t> overdue_seen_;  // seq ids already counted in max_wait_reached_
  std::vector<int64_t> waiting_by_level_;
  std::vector<double> oldest_wait_ms_by_level_;
};

// When the pool runs dry during a step, the least important running candidate (newest first
// among equals) gives its blocks back; recently admitted ones only if nothing else can.
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
};

}  // namespace optimate::optim
