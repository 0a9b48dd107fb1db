#include "kv/copy_tracker.h"

#include <algorithm>

#include "core/error.h"
#include "kv/kv_format.h"

namespace optimate::kv {

CopyTracker::CopyTracker(const KvLayout& layout, int64_t num_device_slots)
    : layout_(layout), batch_of_slot_(static_cast<size_t>(std::max<int64_t>(0, num_device_slots)), -1) {}

void CopyTracker::add(int64_t id, std::span<const KvCopy> copies) {
  OPTIMATE_CHECK(id > last_added_, "copy batch {} recorded after batch {}", id, last_added_);
  last_added_ = id;
  for (const KvCopy& c : copies)
    for (int32_t k = 0; k < c.num_slots; ++k) batch_of_slot_.at(static_cast<size_t>(c.device_slot + k)) = id;
}

void CopyTracker::completed(int64_t id) { completed_ = std::max(completed_, std::min(id, last_added_)); }

int64_t CopyTracker::pending_for(std::span<const int32_t> block_table) const {
  if (idle()) return -1;
  int64_t newest = -1;
  for (int32_t e : block_table) {
    if (e < 0) continue;
    const int64_t first = entry_slot(e);
    const int64_t n = layout_.slots_for(precision_of_code(entry_code(e), layout_.full));
    for (int64_t s = first; s < first + n && s < static_cast<int64_t>(batch_of_slot_.size()); ++s)
      if (batch_of_slot_[static_cast<size_t>(s)] > completed_) newest = std::max(newest, batch_of_slot_[static_cast<size_t>(s)]);
  }
  return newest;
}

}  // namespace optimate::kv
