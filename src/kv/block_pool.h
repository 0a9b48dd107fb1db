// The pool of KV cache blocks: ids, reference counts, precision tags and the prefix cache.
//
// Free blocks sit in one queue ordered by when they were freed (vLLM v1's
// FreeKVCacheBlockQueue): allocation takes from the front, so a freed block that still holds a
// cached prefix survives as long as possible and the least recently used one is evicted first.
// A cache hit on a free block takes it out of the queue again (touch). The pool only does
// bookkeeping; the runner owns the storage that block ids index.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"
#include "kv/kv_precision.h"

namespace optimate::kv {

struct BlockPoolCounters {
  int64_t prefix_queries_tokens = 0;  // tokens looked up in the prefix cache
  int64_t prefix_hits_tokens = 0;     // of those, tokens found cached (prefill skipped)
  int64_t evictions = 0;              // cached blocks reused for new content
};

class BlockPool {
 public:
  BlockPool(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching);

  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  int64_t num_free_blocks() const { return num_free_; }
  // Fraction of blocks held by a sequence (0..1), what vllm:kv_cache_usage_perc reports.
  double usage() const;

  // Takes `count` blocks (ref count 1) tagged `precision`; evicts their cached content.
  // Returns an empty vector when fewer than `count` blocks are free: the caller preempts.
  std::vector<int32_t> allocate(int64_t count, KvPrecision precision);
  // Adds a reference to blocks found in the prefix cache; free ones leave the free queue.
  void touch(std::span<const int32_t> block_ids);
  // Drops one reference from each block; a block reaching zero joins the back of the free
  // queue keeping its cached content. Pass blocks tail first so a sequence's last blocks are
  // evicted before its first ones (a later request more likely shares the beginning).
  void release(std::span<const int32_t> block_ids);

  // A block holding `hash`. Sequences that computed the same content side by side each hold
  // a copy, and every copy stays findable until evicted; a copy in use comes first, since a
  // hit on it costs no free block.
  std::optional<int32_t> cached_block(BlockHash hash) const;
  // Records that `block_id` holds the full block with `hash`; no-op when caching is off or the
  // block is already registered.
  void cache_block(int32_t block_id, BlockHash hash);

  int32_t ref_count(int32_t block_id) const { return blocks_.at(block_id).ref_count; }
  KvPrecision precision(int32_t block_id) const { return blocks_.at(block_id).precision; }
  bool is_free(int32_t block_id) const { return blocks_.at(block_id).ref_count == 0; }

  void count_prefix_lookup(int64_t query_tokens, int64_t hit_tokens);
  const BlockPoolCounters& counters() const { return counters_; }
  // Drops every cached hash (e.g. after weights change); blocks in use are untouched.
  void reset_prefix_cache();

 private:
  static constexpr int32_t kNone = -1;
  struct Block {
    int32_t ref_count = 0;
    KvPrecision precision = KvPrecision::kF32;
    std::optional<BlockHash> hash;
    int32_t prev = kNone;  // free-queue links, valid while ref_count == 0
    int32_t next = kNone;
  };

  void push_back_free(int32_t id);
  void unlink_free(int32_t id);
  void evict(int32_t id);

  int64_t block_size_;
  bool prefix_caching_;
  std::vector<Block> blocks_;
  int32_t free_head_ = kNone;
  int32_t free_tail_ = kNone;
  int64_t num_free_ = 0;
  std::unordered_map<BlockHash, std::vector<int32_t>> cached_;  // every copy of a content
  BlockPoolCounters counters_;
};

}  // namespace optimate::kv
