#include "core/priority_order.h"

#include <limits>

namespace optimate {
namespace {

int64_t negate(int64_t v) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (v == kMin) return kMax;
  if (v == kMax) return kMin;
  return -v;
}

}  // namespace

EnginePriority to_engine_priority(PriorityOrder order, ClientPriority priority) {
  return {order == PriorityOrder::kHigherFirst ? priority.value : negate(priority.value)};
}

ClientPriority to_client_priority(PriorityOrder order, EnginePriority priority) {
  return {order == PriorityOrder::kHigherFirst ? priority.value : negate(priority.value)};
}

}  // namespace optimate
