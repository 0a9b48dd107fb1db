// Which way a client's `priority` value points, and the two kinds of priority value. The
// engine orders by EnginePriority, where a larger value is more important (the seed's rule);
// a client sends a ClientPriority in the convention --priority-order names (vLLM's clients:
// lower-first). Each front end (the server, the Python package, the vLLM plugin, the
// in-process benchmark) converts a client's value once, when the request comes in; the
// engine converts back only to show a value to a user (the decision log, a recorded trace,
// a metric's label). The two are distinct types, so passing one where the other is meant
// does not compile.
#pragma once

#include <compare>
#include <cstdint>
#include <limits>
#include <string_view>

#include "core/choices.h"

namespace optimate {

enum class PriorityOrder {
  kHigherFirst,  // a larger priority runs first (the engine's convention)
  kLowerFirst,   // a smaller priority runs first (vLLM's rule)
};
template <>
struct Choices<PriorityOrder> {
  static constexpr ChoiceName<PriorityOrder> names[] = {{PriorityOrder::kHigherFirst, "higher-first"},
                                                        {PriorityOrder::kLowerFirst, "lower-first"}};
};

// A priority as a client sent it (--priority-order says which way it points).
struct ClientPriority {
  int64_t value = 0;
  auto operator<=>(const ClientPriority&) const = default;
};

// A priority in the engine's order: a larger value is more important.
struct EnginePriority {
  int64_t value = 0;
  auto operator<=>(const EnginePriority&) const = default;
  // What runs before any other request.
  static constexpr EnginePriority highest() { return {std::numeric_limits<int64_t>::max()}; }
};

// A client's value in the engine's order, and back. Saturating: the int64 extremes map onto
// each other, so no value overflows.
EnginePriority to_engine_priority(PriorityOrder order, ClientPriority priority);
ClientPriority to_client_priority(PriorityOrder order, EnginePriority priority);

}  // namespace optimate
