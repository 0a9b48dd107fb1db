// How the priority optimizer reads a request's priority: `levels` levels numbered 0 (least
// important) to levels - 1, a per-level admission deadline, and the aging rate.
//
// Level rule: level = clamp(priority - lowest_priority, 0, levels - 1). A larger priority is
// more important (the server negates vLLM's lower-first values before they get here, see
// --priority-order), and values outside the range are clamped, never rejected: an unknown
// client's priority 100 is simply the top level.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace optimate::optim {

class OptionReader;

struct PriorityOptions {
  int64_t levels = 4;            // low, medium, high, critical
  int64_t lowest_priority = 0;   // the priority value of level 0
  // Waiting time that raises a request's effective level by one (0: no aging). Aging changes
  // the admission order only; it never makes a request preempt another.
  double aging_ms = 5000.0;
  // Per level: a request that has waited this long for its first admission goes ahead of
  // every request that has not (earliest deadline first among them).
  std::vector<double> max_wait_ms;
  bool preempt = true;           // preempt a less important running request for a blocked one
  double min_run_ms = 500.0;     // a (re)admitted request is not preempted for this long
  bool choose_victims = true;    // also pick the least important victim when KV runs dry

  int64_t level_of(int64_t priority) const;
  // "low", "medium", "high", "critical" for up to 4 levels, else "level<K>".
  std::string level_name(int64_t level) const;
  int64_t max_wait_ns(int64_t level) const;

  // Reads [optimizers.priority]: levels, lowest_priority, aging_ms, max_wait_ms (every level),
  // max_wait_ms_<level name> (one level), preempt, min_run_ms, choose_victims. Errors name the
  // option.
  static PriorityOptions read(OptionReader& reader);
};

}  // namespace optimate::optim
