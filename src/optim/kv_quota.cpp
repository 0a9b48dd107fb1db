#include "optim/kv_quota.h"

#include <algorithm>
#include <optional>

namespace optimate::optim {

bool is_long_generation(const KvQuota& quota, const RequestView& r) {
  return r.max_tokens >= quota.long_min_tokens;
}

int64_t blocks_to_admit(const SchedulerView& view, const RequestView& r) {
  const int64_t block_size = std::max<int64_t>(1, view.kv.block_size);
  const int64_t uncomputed = std::max<int64_t>(
      1, r.num_prompt_tokens + r.num_output_tokens - r.num_computed_tokens);
  const int64_t tokens = std::min(uncomputed, std::max<int64_t>(1, view.token_budget_left));
  return (tokens + block_size - 1) / block_size;
}

int64_t blocks_when_computed(const SchedulerView& view, const RequestView& r) {
  const int64_t block_size = std::max<int64_t>(1, view.kv.block_size);
  return (r.num_prompt_tokens + r.num_output_tokens + block_size - 1) / block_size;
}

std::map<EnginePriority, int64_t> long_blocks_by_class(const SchedulerView& view) {
  std::map<EnginePriority, int64_t> out;
  for (const RequestView& r : view.running)
    if (is_long_generation(view.knobs.kv_quota, r)) out[r.metadata.priority] += r.num_blocks;
  return out;
}

std::vector<int64_t> apply_kv_quota(const SchedulerView& view, std::vector<int64_t> order,
                                    std::vector<std::pair<int64_t, QuotaHold>>* held) {
  const KvQuota& quota = view.knobs.kv_quota;
  if (!quota.active()) return order;
  const double share_blocks = quota.long_max_share * static_cast<double>(view.kv.num_blocks);
  std::map<EnginePriority, int64_t> long_blocks = long_blocks_by_class(view);
  int64_t free_blocks = view.kv.num_free_blocks;
  // Distinct blocks in use (a prefix block shared by several sequences counts once).
  int64_t footprint = 0;
  for (int64_t n : view.kv.used_blocks_by_code) footprint += n;
  // Once one request is held for the footprint, none of its priority or below goes past it:
  // smaller requests behind would otherwise take every room it waits for.
  std::optional<EnginePriority> footprint_held;
  std::vector<int64_t> kept;
  kept.reserve(order.size());
  for (int64_t idx : order) {
    const RequestView& r = view.waiting[static_cast<size_t>(idx)];
    const int64_t need = blocks_to_admit(view, r);
    QuotaHold hold = QuotaHold::kNone;
    const bool is_long = quota.long_max_share < 1.0 && is_long_generation(quota, r);
    if (quota.reserve_blocks > 0 && r.metadata.priority < quota.reserve_min_priority &&
        free_blocks - need < quota.reserve_blocks) {
      hold = QuotaHold::kReserve;
    } else if (is_long) {
      // A class holding nothing may always start one: the share limits, never starves.
      const int64_t held_now = long_blocks[r.metadata.priority];
      if (held_now > 0 && static_cast<double>(held_now + need) > share_blocks) hold = QuotaHold::kLongShare;
    }
    const int64_t whole = blocks_when_computed(view, r);
    if (hold == QuotaHold::kNone && quota.footprint_blocks > 0 && r.metadata.priority < quota.footprint_min_priority &&
        ((footprint_held && r.metadata.priority <= *footprint_held) || footprint + whole > quota.footprint_blocks)) {
      hold = QuotaHold::kFootprint;
      if (!footprint_held || r.metadata.priority > *footprint_held) footprint_held = r.metadata.priority;
    }
    if (hold != QuotaHold::kNone) {
      if (held) held->emplace_back(idx, hold);
      continue;
    }
    kept.push_back(idx);
    free_blocks -= need;
    footprint += whole;
    if (is_long) long_blocks[r.metadata.priority] += need;
  }
  return kept;
}

std::optional<int64_t> over_share_victim(const SchedulerView& view,
                                         std::span<const int64_t> candidates) {
  const KvQuota& quota = view.knobs.kv_quota;
  if (quota.long_max_share >= 1.0) return std::nullopt;
  const double share_blocks = quota.long_max_share * static_cast<double>(view.kv.num_blocks);
  const std::map<EnginePriority, int64_t> long_blocks = long_blocks_by_class(view);
  std::optional<int64_t> best;
  for (int64_t i : candidates) {
    const RequestView& r = view.running[static_cast<size_t>(i)];
    if (!is_long_generation(quota, r)) continue;
    auto it = long_blocks.find(r.metadata.priority);
    if (it == long_blocks.end() || static_cast<double>(it->second) <= share_blocks) continue;
    if (!best || r.num_blocks > view.running[static_cast<size_t>(*best)].num_blocks) best = i;
  }
  return best;
}

}  // namespace optimate::optim
