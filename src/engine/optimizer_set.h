// The optimizers one engine runs, as configured and as they stand now: which are enabled,
// which fell back to the baseline and why, their guards (engine/policy_guard.h) and their
// time. The engine hands policies() to the scheduler after every change, between steps.
//
// The last good configuration is the one last applied on purpose (at start, by a reload, by
// the admin API). The engine departs from it only by falling back (a fault) or rolling back
// (an admin request); restore() returns to it.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/policy_guard.h"
#include "optim/registry.h"

namespace optimate {

struct OptimizerFallback {
  FallbackReason reason = FallbackReason::kError;
  std::string detail;
  int64_t at_ns = 0;  // engine clock
};

struct OptimizerState {
  OptimizerSpec spec;   // enabled is false after a fallback or a rollback
  bool baseline = false;
  bool rolled_back = false;
  std::optional<OptimizerFallback> fallback;
  double seconds_total = 0.0;  // time inside its policies since the engine started
  std::vector<optim::PolicyCounter> counters;
};

class OptimizerSet {
 public:
  OptimizerSet(optim::OptimizerRegistry registry, optim::BuildContext context,
               std::shared_ptr<GuardContext> guard);

  // Builds every enabled spec and merges them, changing nothing: Error for an unknown name, a
  // bad option or two optimizers claiming one slot.
  // Returns the merged policies, unguarded.
  optim::PolicySet validate(const std::vector<OptimizerSpec>& specs) const;
  // Replaces every optimizer (start, reload): the new last good configuration.
  void configure(const std::vector<OptimizerSpec>& specs);
  // Enables, retunes or disables one optimizer (the admin API); it joins the good configuration.
  // Re-enabling with unchanged options keeps the optimizer's state.
  void set(const OptimizerSpec& spec);
  // Every optimizer off; the good configuration is kept for restore().
  void rollback();
  void restore();
  // Disables each optimizer whose guard noted a fault since the last call and returns them.
  std::vector<std::pair<std::string, PolicyFault>> take_faults(int64_t now_ns);
  // Disables `name` for a fault found outside its guards; false when it is not enabled.
  bool fall_back(const std::string& name, const PolicyFault& fault, int64_t now_ns);

  // The guarded policies of the enabled optimizers, guarded baselines in the other slots.
  const optim::PolicySet& policies() const { return merged_; }
  // The optimizer filling a slot now; empty for a baseline.
  const std::string& owner(PolicySlot slot) const { return owners_[static_cast<size_t>(slot)]; }
  const std::vector<OptimizerSpec>& good_configuration() const { return good_; }
  std::vector<OptimizerSpec> active_specs() const;

  std::vector<OptimizerState> states() const;
  // Seconds inside the policies, per optimizer and baseline name.
  std::map<std::string, double> seconds() const;
  // Fallbacks since the start, per (optimizer, reason).
  const std::map<std::pair<std::string, std::string>, int64_t>& fallback_counts() const { return fallback_counts_; }

 private:
  struct Entry {
    OptimizerSpec spec;
    optim::PolicySet built;  // empty while disabled
    std::optional<OptimizerFallback> fallback;
    bool rolled_back = false;
  };

  std::shared_ptr<OptimizerHealth> health(const std::string& name, bool baseline);
  Entry* find(const std::string& name);
  void rebuild();
  void disable(Entry& e, const PolicyFault& fault, int64_t now_ns);

  optim::OptimizerRegistry registry_;
  optim::BuildContext context_;
  std::shared_ptr<GuardContext> guard_;
  optim::PolicySet baselines_;  // unguarded: what a failing policy's call falls back to
  std::vector<Entry> entries_;
  std::vector<OptimizerSpec> good_;
  std::map<std::string, std::shared_ptr<OptimizerHealth>> health_;
  optim::PolicySet merged_;
  std::array<std::string, optim::kNumPolicySlots> owners_;
  std::map<std::pair<std::string, std::string>, int64_t> fallback_counts_;
};

}  // namespace optimate
