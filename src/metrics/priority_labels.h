// Values of the `priority` label on the per-priority series.
//
// A label value must come from a small set the operator configured, never from what a client
// sent: every new value adds series that are never removed, so a client choosing its priority
// at random could grow /metrics, and the server's memory, without bound.
//
// The server supplies the rule (with the priority optimizer on: the name of the request's level,
// "low", "high", ...; without it: fixed_priority_labeler). PriorityLabels applies it and caps the
// number of distinct values whatever the rule returns, so a faulty rule cannot break the bound.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>

#include "core/priority_order.h"

namespace optimate::metrics {

// Maps a request's priority to a label value.
using PriorityLabeler = std::function<std::string(EnginePriority priority)>;

// The label of every priority outside a rule's set.
inline constexpr const char* kOtherPriorityLabel = "other";

// Without the priority optimizer: the client's own number when it is one of the few small ones
// clients use (-kMaxFixedPriority..kMaxFixedPriority, the default 0 among them), else "other".
inline constexpr int64_t kMaxFixedPriority = 2;
std::string fixed_priority_label(ClientPriority priority);
// fixed_priority_label of each priority as the clients send it (`order`).
PriorityLabeler fixed_priority_labeler(PriorityOrder order);

class PriorityLabels {
 public:
  // More distinct values than any configured rule makes (the optimizer has at most 64 levels).
  static constexpr size_t kMaxLabels = 72;

  PriorityLabels();
  // Thread-safe; applies to requests labelled from now on.
  void set_labeler(PriorityLabeler labeler);
  // The rule's value, or "other" once kMaxLabels values have been handed out. Thread-safe.
  std::string label(EnginePriority priority);

 private:
  std::mutex mutex_;
  PriorityLabeler labeler_;
  std::set<std::string> issued_;
};

}  // namespace optimate::metrics
