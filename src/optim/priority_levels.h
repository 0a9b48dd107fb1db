// How the priority optimizer reads a request's priority: `levels` levels numbered 0 (least
// important) to levels - 1, a per-level admission deadline, and the aging rate.
//
// Level rule: level = clamp(priority - lowest_priority, 0, levels - 1), on the engine's
// higher-first values (a front end converts vLLM's lower-first values, see --priority-order).
// Values outside the range are clamped, never rejected: an unknown client's priority 100 is
// simply the top level. The default lowest_priority follows the clients' convention, so that
// a client's default priority 0 is the least important level under higher-first and the most
// important under lower-first (where larger values mean background work).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "config/optimizer_options.h"
#include "core/priority_order.h"

namespace optimate::optim {

class OptionReader;

struct PriorityOptions {
  int64_t levels = 4;            // low, medium, high, critical
  EnginePriority lowest_priority;  // the priority value of level 0
  // Inside one level, waiting time that is worth one unit of priority (0: no aging): a level
  // holding several priority values (clamped ones) orders them by value plus waiting time /
  // aging_ms, so the lesser values there are not starved. Aging never crosses levels.
  double aging_ms = 5000.0;
  // Per level: the starvation bound. A request that has waited this long for its first
  // admission may go ahead of more important waiting requests, within overdue_share.
  std::vector<double> max_wait_ms;
  // The largest share of admissions that overdue requests may take ahead of more important
  // waiting ones: the more important classes keep at least 1 - overdue_share of admissions
  // however long the overload lasts.
  double overdue_share = 0.1;
  bool preempt = true;           // preempt a less important running request for a blocked one
  // A request short of KV blocks (blocked for them, or for a slot with too few blocks free as
  // well) preempts only once it has waited this long since it arrived (0: at once): running
  // requests that finish meanwhile free what it needs, while a victim's blocks go to it and are
  // reused, so the victim's whole context is computed again. Blocked for a sequence slot alone
  // it preempts at once: the pool has room, and with prefix caching the victim's blocks stay
  // cached until it resumes.
  double preempt_after_ms = 200.0;
  double min_run_ms = 500.0;     // a (re)admitted request is not preempted for this long
  bool choose_victims = true;    // also pick the least important victim when KV runs dry

  int64_t level_of(EnginePriority priority) const;
  // "low", "medium", "high", "critical" for up to 4 levels, else "level<K>".
  std::string level_name(int64_t level) const;
  int64_t max_wait_ns(int64_t level) const;

  // Reads [optimizers.priority]: levels, lowest_priority, aging_ms, max_wait_ms (every level),
  // max_wait_ms_<level name> (one level), overdue_share, preempt, preempt_after_ms, min_run_ms,
  // choose_victims.
  // `order` is the clients' convention (it sets lowest_priority's default). Errors name the
  // option.
  static PriorityOptions read(OptionReader& reader,
                              PriorityOrder order = PriorityOrder::kHigherFirst);
};

// How metrics name a priority (a label of few values) while `specs` enable the priority
// optimizer: its level's name, with the options given there. nullopt when it is not enabled:
// the clients' own numbers serve then. `order` is the clients' convention.
using PriorityLabeler = std::function<std::string(EnginePriority)>;
std::optional<PriorityLabeler> priority_level_labeler(std::span<const OptimizerSpec> specs, PriorityOrder order);

}  // namespace optimate::optim
