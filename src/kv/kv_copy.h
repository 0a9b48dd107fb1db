// Copies of KV blocks between a runner's device arenas and its host tier (swap preemption and
// the host tier of the prefix cache), as the block bookkeeping hands them to the runner.
//
// The host tier has the device's layout (kv/kv_layout.h): per layer, a K and a V arena of
// num_host_slots slots of slot_bytes each. A copy moves one block, num_slots slots, of every
// layer's K and V, at whatever precision the block is stored in (the bytes are copied as they
// are; the entry's precision code travels with the block table, not the bytes).
//
// A step's copies form one list in the order the bookkeeping decided them; applying them in
// that order is always correct (a block copied out before its slots are handed to another
// block, a host block read before it is reused). Runners that run copies side by side split
// the list into batches with no conflict inside (copy_batches).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace optimate::kv {

enum class CopyDirection : uint8_t {
  kToHost,    // device slots -> host slots (swap-out, a cached prefix evicted to the host tier)
  kToDevice,  // host slots -> device slots (swap-in, a host prefix hit restored)
};

struct KvCopy {
  CopyDirection direction = CopyDirection::kToHost;
  int32_t device_slot = 0;  // first slot of the block in the device arenas
  int32_t host_slot = 0;    // first slot of the block in the host arenas
  int32_t num_slots = 1;    // slots the block takes (its precision's, kv/kv_layout.h)

  bool operator==(const KvCopy&) const = default;
};

// Splits `copies` into consecutive runs that may run in any order or all at once: a run ends
// before a copy that reads slots an earlier copy of the run writes, or writes slots it reads or
// writes. Returns the end index of each run (the last is copies.size()); empty for no copies.
std::vector<size_t> copy_batches(std::span<const KvCopy> copies);

// Error(kInvalidArgument) naming the first copy whose slots fall outside `device_slots` or
// `host_slots` (a runner without a host tier has 0) or that moves no slot.
void check_copies(std::span<const KvCopy> copies, int64_t device_slots, int64_t host_slots);

// Bytes one copy moves: K and V of every layer.
inline int64_t copy_bytes(const KvCopy& c, int64_t num_layers, int64_t slot_bytes) {
  return 2 * num_layers * c.num_slots * slot_bytes;
}

}  // namespace optimate::kv
