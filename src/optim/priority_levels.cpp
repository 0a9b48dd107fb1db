#include "optim/priority_levels.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "optim/registry.h"

namespace optimate::optim {
namespace {

constexpr double kDefaultMaxWaitMs = 30000.0;

}  // namespace

int64_t PriorityOptions::level_of(EnginePriority priority) const {
  // Saturating: priorities near the int64 limits must not overflow the subtraction.
  if (priority <= lowest_priority) return 0;
  const uint64_t above = static_cast<uint64_t>(priority.value) - static_cast<uint64_t>(lowest_priority.value);
  return static_cast<int64_t>(std::min<uint64_t>(above, static_cast<uint64_t>(levels - 1)));
}

std::string PriorityOptions::level_name(int64_t level) const {
  static const char* const kNames[4][4] = {{"all"},
                                           {"low", "high"},
                                           {"low", "medium", "high"},
                                           {"low", "medium", "high", "critical"}};
  if (levels <= 4 && level >= 0 && level < levels) return kNames[levels - 1][level];
  return fmt::format("level{}", level);
}

int64_t PriorityOptions::max_wait_ns(int64_t level) const {
  return static_cast<int64_t>(max_wait_ms[static_cast<size_t>(level)] * 1e6);
}

PriorityOptions PriorityOptions::read(OptionReader& r, PriorityOrder order) {
  PriorityOptions o;
  o.levels = r.get_int("levels", o.levels);
  if (o.levels < 1 || o.levels > 64)
    fail(ErrorCode::kInvalidArgument, "optimizers.priority.levels must be in [1, 64], got {}", o.levels);
  // Lower-first clients send 0 for ordinary work and larger values for background work: 0 is
  // the top level, levels - 1 and above the bottom one.
  const int64_t default_lowest = order == PriorityOrder::kHigherFirst ? 0 : -(o.levels - 1);
  o.lowest_priority = EnginePriority{r.get_int("lowest_priority", default_lowest)};
  o.aging_ms = r.get_ms("aging_ms", o.aging_ms);
  if (o.aging_ms < 0)
    fail(ErrorCode::kInvalidArgument, "optimizers.priority.aging_ms must be >= 0, got {}", o.aging_ms);
  const double every = r.get_ms("max_wait_ms", kDefaultMaxWaitMs);
  o.max_wait_ms.assign(static_cast<size_t>(o.levels), every);
  for (int64_t level = 0; level < o.levels; ++level) {
    const std::string key = "max_wait_ms_" + o.level_name(level);
    o.max_wait_ms[level] = r.get_ms(key, every);
    if (o.max_wait_ms[level] <= 0)
      fail(ErrorCode::kInvalidArgument, "optimizers.priority.{} must be > 0, got {}", key,
           o.max_wait_ms[level]);
  }
  o.overdue_share = r.get_double("overdue_share", o.overdue_share);
  if (o.overdue_share < 0 || o.overdue_share > 1)
    fail(ErrorCode::kInvalidArgument, "optimizers.priority.overdue_share must be in [0, 1], got {}",
         o.overdue_share);
  o.preempt = r.get_bool("preempt", o.preempt);
  o.preempt_after_ms = r.get_ms("preempt_after_ms", o.preempt_after_ms);
  if (o.preempt_after_ms < 0)
    fail(ErrorCode::kInvalidArgument, "optimizers.priority.preempt_after_ms must be >= 0, got {}",
         o.preempt_after_ms);
  o.min_run_ms = r.get_ms("min_run_ms", o.min_run_ms);
  if (o.min_run_ms < 0)
    fail(ErrorCode::kInvalidArgument, "optimizers.priority.min_run_ms must be >= 0, got {}", o.min_run_ms);
  o.choose_victims = r.get_bool("choose_victims", o.choose_victims);
  return o;
}

std::optional<PriorityLabeler> priority_level_labeler(std::span<const OptimizerSpec> specs, PriorityOrder order) {
  const auto spec = std::find_if(specs.rbegin(), specs.rend(),
                                 [](const OptimizerSpec& s) { return s.name == "priority" && s.enabled; });
  if (spec == specs.rend()) return std::nullopt;
  OptionReader reader(*spec);
  const PriorityOptions levels = PriorityOptions::read(reader, order);
  return PriorityLabeler([levels](EnginePriority p) { return levels.level_name(levels.level_of(p)); });
}

}  // namespace optimate::optim
