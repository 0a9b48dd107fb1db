// Driving the scheduler directly with a fake clock: requests arrive at set times, every step
// that runs takes a fixed time, and each sampled token is 7 (never EOS), so what a test sees
// is purely the scheduling: who was admitted, preempted or held back, and when.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "optim/registry.h"
#include "sched/scheduler.h"

namespace optimate::testing {

inline optim::PolicySet build_optimizers(const std::vector<OptimizerSpec>& specs) {
  return optim::OptimizerRegistry::with_builtin().build_all(specs);
}

inline std::shared_ptr<const SamplingParams> tokens(int64_t max_tokens) {
  auto p = std::make_shared<SamplingParams>();
  p->max_tokens = max_tokens;
  p->ignore_eos = true;
  return p;
}

inline sched::StepResult sevens(const sched::StepPlan& plan) {
  sched::StepResult r;
  for (const auto& s : plan.seqs)
    if (s.want_logits) r.tokens.push_back({7, std::nullopt});
  return r;
}

// What happened to each request id, in clock time.
struct Timeline {
  std::map<std::string, int64_t> arrival_ns;
  std::map<std::string, int64_t> first_scheduled_ns;  // start of the first step it ran in
  std::map<std::string, int64_t> first_token_ns;      // end of the step that produced it
  std::map<std::string, int64_t> finished_ns;
  std::vector<int64_t> batch_sizes;                   // sequences per step that ran
  int64_t num_preempted = 0;
};

class SchedHarness {
 public:
  SchedHarness(sched::SchedulerConfig config, optim::PolicySet policies, int64_t step_ns)
      : scheduler_(std::move(config), std::move(policies), clock_), step_ns_(step_ns) {}

  FakeClock& clock() { return clock_; }
  sched::Scheduler& scheduler() { return scheduler_; }
  Timeline& timeline() { return timeline_; }

  // Arrives now, or at `arrival_ns` when given (the time a front end stamped on it).
  void add(const std::string& id, int64_t prompt_len, int64_t max_tokens, int64_t priority,
           std::optional<int64_t> arrival_ns = std::nullopt) {
    sched::RequestMetadata meta;
    meta.priority = priority;
    meta.arrival_ns = arrival_ns;
    // A token of its own per request: no prefix-cache sharing between them.
    const int32_t token = 2 + static_cast<int32_t>(next_seq_ % 1000);
    scheduler_.add_request(id, std::vector<int32_t>(static_cast<size_t>(prompt_len), token),
                           tokens(max_tokens), meta, 0);
    timeline_.arrival_ns[id] = arrival_ns.value_or(clock_.now_ns());
    seq_of_[id] = next_seq_++;  // the scheduler numbers sequences 0, 1, ... (n = 1 here)
  }

  // One schedule(); when it runs something the clock advances by the step time. Returns the
  // plan (its retry_at_ns tells when a held queue is worth another look).
  sched::StepPlan step() {
    const int64_t start = clock_.now_ns();
    sched::StepPlan plan = scheduler_.schedule();
    timeline_.num_preempted += static_cast<int64_t>(plan.preempted.size());
    if (plan.empty()) return plan;
    for (const auto& s : plan.seqs) {
      const std::string& id = scheduler_.find(s.seq_id)->request_id;
      timeline_.first_scheduled_ns.emplace(id, start);
    }
    timeline_.batch_sizes.push_back(static_cast<int64_t>(plan.seqs.size()));
    clock_.advance_ns(step_ns_);
    for (const auto& out : scheduler_.update(plan, sevens(plan))) {
      if (!out.new_token_ids.empty()) timeline_.first_token_ns.emplace(out.request_id, clock_.now_ns());
      if (out.finished) timeline_.finished_ns[out.request_id] = clock_.now_ns();
    }
    return plan;
  }

  bool running(const std::string& id) const { return is_status(id, sched::RequestStatus::kRunning); }
  bool waiting(const std::string& id) const { return is_status(id, sched::RequestStatus::kWaiting); }
  const sched::Request* request(const std::string& id) const {
    auto it = seq_of_.find(id);
    return it == seq_of_.end() ? nullptr : scheduler_.find(it->second);
  }

 private:
  bool is_status(const std::string& id, sched::RequestStatus status) const {
    const sched::Request* r = request(id);
    return r && r->status == status;
  }

  FakeClock clock_;
  sched::Scheduler scheduler_;
  int64_t step_ns_;
  Timeline timeline_;
  std::map<std::string, int64_t> seq_of_;
  int64_t next_seq_ = 0;
};

inline double counter(const optim::Policy& policy, const std::string& name) {
  for (const auto& c : policy.counters())
    if (c.name == name) return c.value;
  ADD_FAILURE() << policy.name() << " has no counter " << name;
  return -1;
}

}  // namespace optimate::testing
