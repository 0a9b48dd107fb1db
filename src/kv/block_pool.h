// The pool of KV cache blocks: which slots hold which block, reference counts, precisions and
// the prefix cache, over the slots of a runner's KV arenas (kv/kv_layout.h).
//
// Blocks are named by block-table entries (kv/kv_format.h: the first slot and the precision).
// A static cache has one slot per page and one block per slot. A dynamic cache has pages of
// page_slots slots; a page holds blocks of one size at a time (one full-precision block, or 2
// 8-bit ones, or 4 int4 ones), so a requantized block frees the rest of its page for blocks of
// its new size.
//
// Free space sits in queues ordered by when it was freed (vLLM v1's FreeKVCacheBlockQueue):
// whole empty pages, and free blocks in pages that still hold live ones; pages never used yet
// apart. Allocation takes free blocks of the right size in partly used pages first (keeping
// pages whole for full blocks), then a whole page: an untouched one or the least recently freed
// one, in the order FreeSpaceOrder says. A cache hit on a free block takes it out of the queues
// again (touch). The pool only does bookkeeping; the runner owns the storage.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/block_hash.h"
#include "kv/index_queue.h"
#include "kv/kv_layout.h"
#include "kv/kv_precision.h"

namespace optimate::kv {

struct BlockPoolCounters {
  int64_t prefix_queries_tokens = 0;  // tokens looked up in the prefix cache
  int64_t prefix_hits_tokens = 0;     // of those, tokens found cached (prefill skipped)
  int64_t evictions = 0;              // cached blocks reused for new content
  int64_t requantized_blocks = 0;     // full-precision blocks turned quantized in place
  std::map<KvPrecision, int64_t> requantized_to;  // the same, by the precision they took
};

// A cached block whose space allocate() took for new content (its bytes are still intact until
// the new owner writes them).
struct EvictedBlock {
  int32_t entry = 0;
  BlockHash hash = 0;
};

class BlockPool {
 public:
  // A static full-precision cache of `num_blocks` blocks (entries equal slot ids).
  BlockPool(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching);
  // `num_slots` slots laid out as `layout` says (a multiple of its page_slots).
  BlockPool(const KvLayout& layout, int64_t num_slots, int64_t block_size, bool enable_prefix_caching,
            FreeSpaceOrder order = FreeSpaceOrder::kUntouchedFirst);

  const KvLayout& layout() const { return layout_; }
  int64_t num_slots() const { return static_cast<int64_t>(slots_.size()); }
  // Blocks of the base precision the cache holds when empty.
  int64_t num_blocks() const { return num_slots() / layout_.slots_for(layout_.base); }
  int64_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  int64_t num_free_slots() const { return num_slots() - live_slots_; }
  // Blocks of `precision` (default: the base) that allocate() could hand out now.
  int64_t num_free_blocks(std::optional<KvPrecision> precision = std::nullopt) const;
  // Fraction of slots held by a sequence (0..1), what vllm:kv_cache_usage_perc reports.
  double usage() const;
  // Live blocks per precision.
  const std::map<KvPrecision, int64_t>& live_blocks() const { return live_blocks_; }

  // Takes `count` blocks (ref count 1) of `precision`; evicts whatever cached content the
  // space held. Returns an empty vector, changing nothing, when fewer than `count` fit.
  std::vector<int32_t> allocate(int64_t count, KvPrecision precision);
  // One block (ref count 1) per precision given, entries in the same order; all or none (an
  // empty vector when they do not fit, though cached content may have been evicted trying).
  std::vector<int32_t> allocate_each(std::span<const KvPrecision> precisions);
  // Adds a reference to blocks found in the prefix cache; free ones leave the free queues.
  void touch(std::span<const int32_t> entries);
  // Drops one reference from each block; a block reaching zero becomes free, keeping its cached
  // content. Pass blocks tail first so a sequence's last blocks are evicted before its first
  // ones (a later request more likely shares the beginning).
  void release(std::span<const int32_t> entries);
  // Turns a full-precision block held once into a block of `precision`; returns the new entry.
  // It moves into a free block of that size in a partly used page when there is one (holding no
  // cached content), which frees its whole page; otherwise it stays at its slot and frees the
  // rest of its page. The runner rewrites the bytes from the old slot into the new one
  // (ModelRunner::requantize). Error(kInvalidArgument) for a shared, free or quantized block.
  int32_t requantize(int32_t entry, KvPrecision precision);

  // A block holding `hash` (at full precision only, when `full_only`). Sequences that computed
  // the same content side by side each hold a copy, and every copy stays findable until
  // evicted; a copy in use comes first, since a hit on it costs no free block.
  std::optional<int32_t> cached_block(BlockHash hash, bool full_only = false) const;
  // Records that the block holds the full block with `hash`; no-op when caching is off or the
  // block is already registered.
  void cache_block(int32_t entry, BlockHash hash);

  int32_t ref_count(int32_t entry) const { return block(entry).ref_count; }
  KvPrecision precision(int32_t entry) const { return block(entry).precision; }
  bool is_free(int32_t entry) const { return block(entry).ref_count == 0; }

  // While on, allocate() remembers the cached blocks it evicts until take_evicted() (the host
  // tier of the prefix cache copies them out before they are overwritten).
  void record_evictions(bool on) { record_evictions_ = on; }
  std::vector<EvictedBlock> take_evicted() { return std::exchange(evicted_, {}); }
  // Blocks holding a registered hash, free or not.
  int64_t num_cached_blocks() const { return num_cached_blocks_; }

  void count_prefix_lookup(int64_t query_tokens, int64_t hit_tokens);
  const BlockPoolCounters& counters() const { return counters_; }
  // Drops every cached hash (e.g. after weights change); blocks in use are untouched.
  void reset_prefix_cache();

 private:
  struct Slot {  // meaningful at a block's first slot
    int32_t ref_count = 0;
    int32_t size = 0;  // slots of the block starting here; 0: not a block start
    KvPrecision precision = KvPrecision::kF32;
    std::optional<BlockHash> hash;
  };
  struct Page {
    int32_t live_slots = 0;
    int32_t block_slots = 0;  // size of the blocks the page is carved into (0: never used)
  };

  const Slot& block(int32_t entry) const;
  Slot& block(int32_t entry);
  int32_t entry_of(int32_t slot) const;
  int32_t page_of(int32_t slot) const { return slot / static_cast<int32_t>(layout_.page_slots); }
  IndexQueue& partial_free(int32_t size);
  int64_t num_empty_pages() const {
    return empty_pages_.size() + static_cast<int64_t>(pages_.size()) - next_untouched_page_;
  }
  // Carves an empty page into blocks of `size` slots, evicting what it cached; the blocks
  // after the first join the partial free queue.
  int32_t take_empty_page(int32_t size, KvPrecision precision);
  void take(int32_t slot, KvPrecision precision);
  // A page's live slots change by `delta`; counts the pages that hold live blocks.
  void add_live_slots(int32_t page, int32_t delta);
  void evict(int32_t slot);

  KvLayout layout_;
  int64_t block_size_;
  bool prefix_caching_;
  FreeSpaceOrder order_;
  std::vector<Slot> slots_;
  std::vector<Page> pages_;
  IndexQueue empty_pages_;              // used pages with no live block, by when they emptied
  int32_t next_untouched_page_ = 0;     // pages from here on were never used
  int32_t num_live_pages_ = 0;          // pages holding a live block
  int32_t peak_live_pages_ = 0;         // the most ever at once
  std::vector<IndexQueue> partial_;     // [size]: free blocks of that size in live pages (by slot)
  int64_t live_slots_ = 0;
  std::map<KvPrecision, int64_t> live_blocks_;
  std::unordered_map<BlockHash, std::vector<int32_t>> cached_;  // hash -> first slot of every copy
  int64_t num_cached_blocks_ = 0;
  bool record_evictions_ = false;
  std::vector<EvictedBlock> evicted_;
  BlockPoolCounters counters_;
};

}  // namespace optimate::kv
