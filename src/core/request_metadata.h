// What a client tells the scheduler about a request beyond its prompt and sampling parameters:
// one record, filled by each front end (the server's request parser, the Python package), kept
// whole by the scheduler's Request and shown whole to the policies in their RequestView. A new
// field is declared here, read from the HTTP body (server/generation_request.cpp), bound once
// for Python (python/src/policy_views.cpp), and read by the policy that wants it; nothing
// copies fields one by one in between. Keep the fields cheap to copy: a policy's view is built
// for every decision.
#pragma once

#include <cstdint>
#include <optional>

#include "core/priority_order.h"

namespace optimate {

struct RequestMetadata {
  // In the engine's order: each front end converts the client's value once
  // (core/priority_order.h).
  EnginePriority priority;
  // When the request arrived, on the engine clock; nullopt: when the scheduler takes it. Only
  // replays (the in-process benchmark) set it.
  std::optional<int64_t> arrival_ns;
};

}  // namespace optimate
