// The host-memory tier of the KV cache: host arenas with the device pool's layout (the runner
// owns them; kv/kv_copy.h), split into two regions with their own bookkeeping:
//
//   swap    host slots [0, swap_slots): the blocks of preempted sequences, one owner each
//           until they are copied back (swap preemption).
//   prefix  host slots [swap_slots, swap_slots + prefix_slots): cached prefix blocks the device
//           pool evicted, kept instead of dropped. Every block there is free with its hash
//           registered; storing a new one takes the space of the least recently stored or used
//           (a BlockPool's free queues are in the order blocks were freed), so the region is an
//           LRU cache bounded by its own size.
//
// Entries are the regions' own (a BlockPool each); host_slot() turns one into an arena slot.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_format.h"

namespace optimate::kv {

struct HostTierSlots {
  int64_t swap = 0;    // slots of the swap region (whole pages; 0: no swap space)
  int64_t prefix = 0;  // slots of the prefix region (whole pages; 0: no host prefix cache)
};

// The regions `swap_bytes` and `prefix_bytes` of host memory hold, in whole pages of `layout`
// (K and V of `num_layers` layers per slot), within `max_slots` in all (what a runner allocated).
HostTierSlots plan_host_tier(int64_t swap_bytes, int64_t prefix_bytes, int64_t num_layers, const KvLayout& layout,
                             int64_t max_slots = kEntrySlotMask);

class HostTier {
 public:
  HostTier(const KvLayout& layout, HostTierSlots slots, int64_t block_size);

  const HostTierSlots& slots() const { return slots_; }
  bool has_swap() const { return swap_.has_value(); }
  bool has_prefix() const { return prefix_.has_value(); }

  // Swap region: one block per precision given, in order; all or none (empty: no room).
  std::vector<int32_t> allocate_swap(std::span<const KvPrecision> precisions);
  void release_swap(std::span<const int32_t> entries);
  int32_t swap_slot(int32_t entry) const { return entry_slot(entry); }
  // Blocks of the cache's base precision the swap region could take now (0 without one).
  int64_t num_free_swap_blocks() const;
  int64_t num_swap_blocks() const { return swap_ ? swap_->num_blocks() : 0; }

  // Prefix region: the block holding `hash` (full precision only, when `full_only`).
  std::optional<int32_t> find_prefix(BlockHash hash, bool full_only) const;
  // Makes room for a block of `precision` holding `hash` (evicting the least recently used)
  // and returns its entry, which the caller fills with a copy; nullopt when the region already
  // holds the hash at that precision (it then counts as just used) or has no region.
  std::optional<int32_t> store_prefix(BlockHash hash, KvPrecision precision);
  // Holds blocks while a step's copies read them, so no store reuses their space meanwhile.
  void pin_prefix(std::span<const int32_t> entries);
  void unpin_prefix(std::span<const int32_t> entries);
  int32_t prefix_slot(int32_t entry) const { return static_cast<int32_t>(slots_.swap) + entry_slot(entry); }
  int64_t num_prefix_blocks() const { return prefix_ ? prefix_->num_blocks() : 0; }
  int64_t num_cached_prefix_blocks() const { return prefix_ ? prefix_->num_cached_blocks() : 0; }
  void reset_prefix_cache();

 private:
  HostTierSlots slots_;
  std::optional<BlockPool> swap_;
  std::optional<BlockPool> prefix_;
};

}  // namespace optimate::kv
