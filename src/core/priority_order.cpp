#include "core/priority_order.h"

#include <limits>

#include "core/error.h"

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

PriorityOrder parse_priority_order(std::string_view text, std::string_view what) {
  if (text == "higher-first") return PriorityOrder::kHigherFirst;
  if (text == "lower-first") return PriorityOrder::kLowerFirst;
  fail(ErrorCode::kInvalidArgument, "{} must be higher-first or lower-first, got '{}'", what, text);
}

std::string_view priority_order_name(PriorityOrder order) {
  return order == PriorityOrder::kHigherFirst ? "higher-first" : "lower-first";
}

EnginePriority to_engine_priority(PriorityOrder order, ClientPriority priority) {
  return {order == PriorityOrder::kHigherFirst ? priority.value : negate(priority.value)};
}

ClientPriority to_client_priority(PriorityOrder order, EnginePriority priority) {
  return {order == PriorityOrder::kHigherFirst ? priority.value : negate(priority.value)};
}

}  // namespace optimate
