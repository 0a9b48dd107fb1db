#include "kv/block_pool.h"

#include "core/error.h"

namespace optimate::kv {

BlockPool::BlockPool(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching)
    : block_size_(block_size), prefix_caching_(enable_prefix_caching) {
  if (num_blocks < 1 || num_blocks > INT32_MAX)
    fail(ErrorCode::kInvalidArgument, "KV cache needs between 1 and 2^31 blocks, got {}",
         num_blocks);
  if (block_size < 1 || block_size > 1024)
    fail(ErrorCode::kInvalidArgument, "block-size must be in [1, 1024], got {}", block_size);
  blocks_.resize(static_cast<size_t>(num_blocks));
  for (int32_t id = 0; id < static_cast<int32_t>(num_blocks); ++id) push_back_free(id);
}

double BlockPool::usage() const {
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(blocks_.size());
}

void BlockPool::push_back_free(int32_t id) {
  Block& b = blocks_[id];
  b.prev = free_tail_;
  b.next = kNone;
  if (free_tail_ != kNone) blocks_[free_tail_].next = id; else free_head_ = id;
  free_tail_ = id;
  ++num_free_;
}

void BlockPool::unlink_free(int32_t id) {
  Block& b = blocks_[id];
  if (b.prev != kNone) blocks_[b.prev].next = b.next; else free_head_ = b.next;
  if (b.next != kNone) blocks_[b.next].prev = b.prev; else free_tail_ = b.prev;
  b.prev = b.next = kNone;
  --num_free_;
}

void BlockPool::evict(int32_t id) {
  Block& b = blocks_[id];
  if (!b.hash) return;
  auto it = cached_.find(*b.hash);
  if (it != cached_.end()) {
    std::erase(it->second, id);
    if (it->second.empty()) cached_.erase(it);
  }
  b.hash.reset();
  ++counters_.evictions;
}

std::vector<int32_t> BlockPool::allocate(int64_t count, KvPrecision precision) {
  std::vector<int32_t> ids;
  if (count <= 0 || count > num_free_) return ids;
  ids.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const int32_t id = free_head_;
    unlink_free(id);
    evict(id);
    Block& b = blocks_[id];
    b.ref_count = 1;
    b.precision = precision;
    ids.push_back(id);
  }
  return ids;
}

void BlockPool::touch(std::span<const int32_t> block_ids) {
  for (int32_t id : block_ids) {
    Block& b = blocks_.at(id);
    if (b.ref_count == 0) unlink_free(id);
    ++b.ref_count;
  }
}

void BlockPool::release(std::span<const int32_t> block_ids) {
  for (int32_t id : block_ids) {
    Block& b = blocks_.at(id);
    OPTIMATE_CHECK(b.ref_count > 0, "block {} released more often than taken", id);
    if (--b.ref_count == 0) push_back_free(id);
  }
}

std::optional<int32_t> BlockPool::cached_block(BlockHash hash) const {
  if (!prefix_caching_) return std::nullopt;
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  for (int32_t id : it->second)
    if (blocks_[id].ref_count > 0) return id;
  return it->second.front();
}

void BlockPool::cache_block(int32_t block_id, BlockHash hash) {
  if (!prefix_caching_) return;
  Block& b = blocks_.at(block_id);
  if (b.hash) return;
  cached_[hash].push_back(block_id);
  b.hash = hash;
}

void BlockPool::count_prefix_lookup(int64_t query_tokens, int64_t hit_tokens) {
  counters_.prefix_queries_tokens += query_tokens;
  counters_.prefix_hits_tokens += hit_tokens;
}

void BlockPool::reset_prefix_cache() {
  for (auto& b : blocks_) b.hash.reset();
  cached_.clear();
}

}  // namespace optimate::kv
