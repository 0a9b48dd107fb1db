// Per-sequence block tables over one BlockPool: prefix-cache lookup, slot allocation for the
// tokens a step will compute, registration of newly computed full blocks, forking and freeing;
// and the host tier (kv/host_tier.h): swapping a sequence's blocks out and back in, and keeping
// cached prefix blocks the device pool evicts.
//
// A block is registered in the prefix cache only once its tokens have been computed (commit),
// so a request scheduled in the same step as the one computing a prefix never reads KV that
// the forward pass has not written yet. Blocks restored from the host tier are registered at
// once: the runner applies a step's copies before its forward pass.
//
// Every operation that moves bytes between the tiers appends a KvCopy to a list the scheduler
// takes into the step plan (take_copies); the list's order is what makes it correct (a block is
// copied out before its space is written, a host block read before it is reused).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "kv/host_tier.h"
#include "kv/kv_copy.h"
#include "kv/kv_format.h"

namespace optimate::kv {

using SeqId = int64_t;

struct PrefixHit {
  std::vector<int32_t> block_ids;       // device blocks covering the first num_device_tokens
  std::vector<int32_t> host_block_ids;  // then host prefix-tier blocks, restored by a copy
  int64_t num_device_tokens = 0;
  int64_t num_tokens = 0;               // both tiers
};

struct KvTierCounters {
  int64_t swapped_out_blocks = 0;           // blocks copied to the host swap region
  int64_t swapped_in_blocks = 0;            // and back
  int64_t host_prefix_queries_tokens = 0;   // tokens looked up in the host tier (device misses)
  int64_t host_prefix_hits_tokens = 0;      // of those, found there (restored, prefill skipped)
  int64_t host_prefix_stored_blocks = 0;    // device evictions kept in host memory
};

class KvCacheManager {
 public:
  // A static full-precision cache of `num_blocks` blocks.
  KvCacheManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching);
  KvCacheManager(const KvLayout& layout, int64_t num_slots, int64_t block_size, bool enable_prefix_caching,
                 HostTierSlots host = {}, FreeSpaceOrder order = FreeSpaceOrder::kUntouchedFirst);

  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  int64_t block_size() const { return pool_.block_size(); }
  const HostTier& host() const { return host_; }
  const KvTierCounters& tier_counters() const { return counters_; }

  // Longest cached prefix of `token_ids`, block aligned and leaving at least the last token to
  // compute (its logits are needed): device blocks first, then (with a host prefix tier) the
  // blocks that follow from host memory. A sequence that will be stored at full precision takes
  // no quantized block (it stops at the first); a quantized one takes any. Takes no references
  // and counts nothing: a lookup whose allocation then fails is repeated later, so the caller
  // counts the one that was used.
  PrefixHit find_cached_prefix(SeqId seq, std::span<const int32_t> token_ids,
                               std::optional<KvPrecision> precision = std::nullopt);
  // Counts a lookup of `query_tokens` per tier: the device tier answered hit.num_device_tokens;
  // the host tier (when there is one) was asked for the rest and answered the others.
  void record_prefix_lookup(int64_t query_tokens, const PrefixHit& hit);

  // Makes room for positions [0, num_computed + num_new) of `seq`. A new sequence passes its
  // prefix hit, whose device blocks it then shares and whose host blocks are copied into new
  // device blocks. Returns false, changing nothing but cached content evicted on the way, when
  // the pool has too few free blocks.
  bool allocate(SeqId seq, int64_t num_computed, int64_t num_new, const PrefixHit& hit,
                KvPrecision precision);
  // Registers the full blocks among the first `num_computed` tokens in the prefix cache.
  void commit(SeqId seq, std::span<const int32_t> token_ids, int64_t num_computed);
  // `child` starts with the parent's full blocks covering its first `num_tokens` tokens
  // (shared, reference counted); returns how many tokens that covers.
  int64_t fork(SeqId parent, SeqId child, int64_t num_tokens);
  // Returns every block of `seq` to the pool (tail first), or to the host swap region when it
  // is swapped out; unknown ids are ignored.
  void free(SeqId seq);

  // Swap preemption. swap_out copies the blocks holding the first `num_computed` tokens of
  // `seq` to the host swap region and frees all its device blocks; false, changing nothing,
  // when there is nothing to copy or the region lacks room (the caller recomputes instead).
  bool swap_out(SeqId seq, int64_t num_computed);
  // Copies a swapped-out sequence back into new device blocks (at the precisions they had) and
  // frees its host blocks; false, changing nothing but evicted cached content, when the device
  // pool lacks room.
  bool swap_in(SeqId seq);
  bool is_swapped(SeqId seq) const { return swapped_.count(seq) != 0; }
  // Slots holding the first `num_computed` tokens of `seq`: what swapping it out would copy.
  int64_t num_slots_for_tokens(SeqId seq, int64_t num_computed) const;
  // The copies decided since the last call, in order.
  std::vector<KvCopy> take_copies() { return std::exchange(copies_, {}); }
  // Forgets every cached prefix, on the device and in the host tier.
  void reset_prefix_cache();
  // Requantizes block `index` of `seq` in place (BlockPool::requantize) and returns the op the
  // runner must apply before the next forward.
  RequantizeOp requantize(SeqId seq, int64_t index, KvPrecision precision);

  bool has(SeqId seq) const { return tables_.count(seq) != 0; }
  int64_t num_swapped() const { return static_cast<int64_t>(swapped_.size()); }
  std::span<const int32_t> block_ids(SeqId seq) const;
  int64_t num_sequences() const { return static_cast<int64_t>(tables_.size()); }
  // Blocks needed to grow `seq` to `num_tokens` positions (0 if it already has them).
  int64_t blocks_needed(SeqId seq, int64_t num_tokens) const;

 private:
  struct SwappedTable {
    std::vector<int32_t> host_ids;  // swap-region entries, in position order
    std::vector<BlockHash> block_hashes;
  };

  int64_t num_blocks_for(int64_t num_tokens) const {
    return (num_tokens + block_size() - 1) / block_size();
  }
  KvPrecision precision_of(int32_t entry) const {
    return precision_of_code(entry_code(entry), pool_.layout().full);
  }
  int32_t slots_of(int32_t entry) const {
    return static_cast<int32_t>(pool_.layout().slots_for(precision_of(entry)));
  }
  // Keeps the cached blocks the device pool just evicted in the host prefix tier (a copy each).
  void keep_evicted();
  // Device blocks for the host hits, filled by copies and registered; empty when they do not fit.
  std::vector<int32_t> restore(std::span<const int32_t> host_ids, std::span<const BlockHash> hashes);

  BlockPool pool_;
  HostTier host_;
  std::unordered_map<SeqId, BlockTable> tables_;
  std::unordered_map<SeqId, SwappedTable> swapped_;
  std::vector<KvCopy> copies_;
  KvTierCounters counters_;
};

}  // namespace optimate::kv
