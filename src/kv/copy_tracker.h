// Which device slots the KV copies still in flight touch (kv/kv_copy.h), for a runner that
// overlaps the copies with its steps: a step waits for a copy only when one of its blocks is
// among the slots that copy reads or writes.
//
// Copies are recorded in batches numbered in the order they were issued (one stream: a batch
// completes after every earlier one); the runner reports completions as it learns of them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/kv_copy.h"
#include "kv/kv_layout.h"

namespace optimate::kv {

class CopyTracker {
 public:
  CopyTracker(const KvLayout& layout, int64_t num_device_slots);

  // Records batch `id` (larger than every earlier one) of `copies`.
  void add(int64_t id, std::span<const KvCopy> copies);
  // Batches up to `id` are done.
  void completed(int64_t id);
  bool idle() const { return last_added_ <= completed_; }
  // The newest batch not yet done whose copies touch a block of `block_table` (entries as in
  // kv/kv_format.h), or -1.
  int64_t pending_for(std::span<const int32_t> block_table) const;

 private:
  KvLayout layout_;
  std::vector<int64_t> batch_of_slot_;  // [device slot]: the last batch touching it (-1: none)
  int64_t last_added_ = -1;
  int64_t completed_ = -1;
};

}  // namespace optimate::kv
