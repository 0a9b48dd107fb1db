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

int64_t to_engine_priority(PriorityOrder order, int64_t client_priority) {
  return order == PriorityOrder::kHigherFirst ? client_priority : negate(client_priority);
}

int64_t to_client_priority(PriorityOrder order, int64_t engine_priority) {
  return order == PriorityOrder::kHigherFirst ? engine_priority : negate(engine_priority);
}

}  // namespace optimate
