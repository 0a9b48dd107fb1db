#include "metrics/priority_labels.h"

namespace optimate::metrics {

std::string fixed_priority_label(ClientPriority priority) {
  if (priority.value < -kMaxFixedPriority || priority.value > kMaxFixedPriority) return kOtherPriorityLabel;
  return std::to_string(priority.value);
}

PriorityLabeler fixed_priority_labeler(PriorityOrder order) {
  return [order](EnginePriority p) { return fixed_priority_label(to_client_priority(order, p)); };
}

PriorityLabels::PriorityLabels() : labeler_(fixed_priority_labeler(PriorityOrder::kHigherFirst)) {}

void PriorityLabels::set_labeler(PriorityLabeler labeler) {
  std::lock_guard lock(mutex_);
  labeler_ = std::move(labeler);
}

std::string PriorityLabels::label(EnginePriority priority) {
  std::lock_guard lock(mutex_);
  std::string value = labeler_(priority);
  if (issued_.count(value)) return value;
  if (issued_.size() + 1 >= kMaxLabels) return kOtherPriorityLabel;  // keeps room for "other"
  issued_.insert(value);
  return value;
}

}  // namespace optimate::metrics
