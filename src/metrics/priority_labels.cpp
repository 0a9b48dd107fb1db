#include "metrics/priority_labels.h"

namespace optimate::metrics {

std::string fixed_priority_label(int64_t client_priority) {
  if (client_priority < -kMaxFixedPriority || client_priority > kMaxFixedPriority)
    return kOtherPriorityLabel;
  return std::to_string(client_priority);
}

PriorityLabels::PriorityLabels() : labeler_([](int64_t p) { return fixed_priority_label(p); }) {}

void PriorityLabels::set_labeler(PriorityLabeler labeler) {
  std::lock_guard lock(mutex_);
  labeler_ = std::move(labeler);
}

std::string PriorityLabels::label(int64_t client_priority) {
  std::lock_guard lock(mutex_);
  std::string value = labeler_(client_priority);
  if (issued_.count(value)) return value;
  if (issued_.size() + 1 >= kMaxLabels) return kOtherPriorityLabel;  // keeps room for "other"
  issued_.insert(value);
  return value;
}

}  // namespace optimate::metrics
