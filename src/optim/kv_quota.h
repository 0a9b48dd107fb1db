// Enforcement of the KV quota per priority class (views.h KvQuota) by queue and preemption
// policies. A controller sets the quota; these functions are how any policy honours it, so
// the scheduler never knows it exists:
//   - admission: a request the quota holds back is left out of the queue policy's order (it
//     waits this step; the others behind it are not blocked by it);
//   - victims: when the pool runs dry, a long generation of a class over its share goes first.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "optim/api/views.h"

namespace optimate::optim {

enum class QuotaHold {
  kNone,
  kReserve,    // it would eat into the blocks reserved for more important requests
  kLongShare,  // its class's long generations already hold their share of the pool
  kFootprint,  // the blocks in use would pass footprint_blocks (or one ahead of it was held so)
};

bool is_long_generation(const KvQuota& quota, const RequestView& r);

// Blocks a waiting request's first chunk takes (its whole uncomputed prompt, within the token
// budget left), ignoring prefix-cache hits: an upper bound.
int64_t blocks_to_admit(const SchedulerView& view, const RequestView& r);

// Blocks a waiting request holds once every token it has so far is computed: what it adds to
// the running sequences' footprint.
int64_t blocks_when_computed(const SchedulerView& view, const RequestView& r);

// Blocks each class's long generations hold now (by priority).
std::map<EnginePriority, int64_t> long_blocks_by_class(const SchedulerView& view);

// `order` (indices into view.waiting, in admission order) without the requests the quota holds
// back this step. Admissions earlier in the order count against the reserve and the shares of
// later ones. `held`, when given, receives what held each request left out.
std::vector<int64_t> apply_kv_quota(const SchedulerView& view, std::vector<int64_t> order,
                                    std::vector<std::pair<int64_t, QuotaHold>>* held = nullptr);

// Among `candidates` (indices into view.running), the long generation holding the most blocks
// in a class over its share; nullopt when the quota names none.
std::optional<int64_t> over_share_victim(const SchedulerView& view,
                                         std::span<const int64_t> candidates);

}  // namespace optimate::optim
