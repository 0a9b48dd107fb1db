// Which way a client's `priority` value points. The engine's own convention is higher-first
// (a larger number is more important, the seed's rule); vLLM's clients send lower-first
// values. The conversion between the two lives here and nowhere else.
#pragma once

#include <cstdint>
#include <string_view>

namespace optimate {

enum class PriorityOrder {
  kHigherFirst,  // a larger priority runs first (the engine's convention)
  kLowerFirst,   // a smaller priority runs first (vLLM's rule)
};

// "higher-first" or "lower-first"; Error(kInvalidArgument) naming `what` otherwise.
PriorityOrder parse_priority_order(std::string_view text, std::string_view what);
std::string_view priority_order_name(PriorityOrder order);

// A client's value in the engine's convention, and back. Saturating: the int64 extremes map
// onto each other, so no value overflows.
int64_t to_engine_priority(PriorityOrder order, int64_t client_priority);
int64_t to_client_priority(PriorityOrder order, int64_t engine_priority);

}  // namespace optimate
