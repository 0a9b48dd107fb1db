// Per-sequence block tables over one BlockPool: prefix-cache lookup, slot allocation for the
// tokens a step will compute, registration of newly computed full blocks, forking and freeing.
//
// A block is registered in the prefix cache only once its tokens have been computed (commit),
// so a request scheduled in the same step as the one computing a prefix never reads KV that
// the forward pass has not written yet.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "kv/kv_format.h"

namespace optimate::kv {

using SeqId = int64_t;

struct PrefixHit {
  std::vector<int32_t> block_ids;  // cached blocks covering the first num_tokens tokens
  int64_t num_tokens = 0;
};

class KvCacheManager {
 public:
  // A static full-precision cache of `num_blocks` blocks.
  KvCacheManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching);
  KvCacheManager(const KvLayout& layout, int64_t num_slots, int64_t block_size, bool enable_prefix_caching);

  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  int64_t block_size() const { return pool_.block_size(); }

  // Longest cached prefix of `token_ids`, block aligned and leaving at least the last token to
  // compute (its logits are needed). A sequence that will be stored at full precision takes
  // no quantized block (it stops at the first); a quantized one takes any. Takes no references
  // and counts nothing: a lookup whose allocation then fails is repeated later, so the caller
  // counts the one that was used.
  PrefixHit find_cached_prefix(SeqId seq, std::span<const int32_t> token_ids,
                               std::optional<KvPrecision> precision = std::nullopt);
  void record_prefix_lookup(int64_t query_tokens, int64_t hit_tokens) {
    pool_.count_prefix_lookup(query_tokens, hit_tokens);
  }

  // Makes room for positions [0, num_computed + num_new) of `seq`. A new sequence passes its
  // prefix hit, whose blocks it then shares. Returns false, changing nothing, when the pool has
  // too few free blocks.
  bool allocate(SeqId seq, int64_t num_computed, int64_t num_new, const PrefixHit& hit,
                KvPrecision precision);
  // Registers the full blocks among the first `num_computed` tokens in the prefix cache.
  void commit(SeqId seq, std::span<const int32_t> token_ids, int64_t num_computed);
  // `child` starts with the parent's full blocks covering its first `num_tokens` tokens
  // (shared, reference counted); returns how many tokens that covers.
  int64_t fork(SeqId parent, SeqId child, int64_t num_tokens);
  // Returns every block of `seq` to the pool (tail first); unknown ids are ignored.
  void free(SeqId seq);
  // Requantizes block `index` of `seq` in place (BlockPool::requantize) and returns the op the
  // runner must apply before the next forward.
  RequantizeOp requantize(SeqId seq, int64_t index, KvPrecision precision);

  bool has(SeqId seq) const { return tables_.count(seq) != 0; }
  std::span<const int32_t> block_ids(SeqId seq) const;
  int64_t num_sequences() const { return static_cast<int64_t>(tables_.size()); }
  // Blocks needed to grow `seq` to `num_tokens` positions (0 if it already has them).
  int64_t blocks_needed(SeqId seq, int64_t num_tokens) const;

 private:
  int64_t num_blocks_for(int64_t num_tokens) const {
    return (num_tokens + block_size() - 1) / block_size();
  }

  BlockPool pool_;
  std::unordered_map<SeqId, BlockTable> tables_;
};

}  // namespace optimate::kv
