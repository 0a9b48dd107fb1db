#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "core/error.h"

namespace optimate::kv {

KvCacheManager::KvCacheManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching)
    : pool_(num_blocks, block_size, enable_prefix_caching) {}

KvCacheManager::KvCacheManager(const KvLayout& layout, int64_t num_slots, int64_t block_size,
                               bool enable_prefix_caching)
    : pool_(layout, num_slots, block_size, enable_prefix_caching) {}

PrefixHit KvCacheManager::find_cached_prefix(SeqId seq, std::span<const int32_t> token_ids,
                                             std::optional<KvPrecision> precision) {
  PrefixHit hit;
  if (!pool_.prefix_caching() || token_ids.empty()) return hit;
  BlockTable& table = tables_[seq];
  extend_block_hashes(token_ids, block_size(), table.block_hashes);
  const int64_t max_blocks = (static_cast<int64_t>(token_ids.size()) - 1) / block_size();
  for (int64_t b = 0; b < max_blocks; ++b) {
    auto id = pool_.cached_block(table.block_hashes[b], precision && is_full_precision(*precision));
    if (!id) break;
    hit.block_ids.push_back(*id);
  }
  hit.num_tokens = static_cast<int64_t>(hit.block_ids.size()) * block_size();
  return hit;
}

int64_t KvCacheManager::blocks_needed(SeqId seq, int64_t num_tokens) const {
  auto it = tables_.find(seq);
  const int64_t have = it == tables_.end() ? 0 : static_cast<int64_t>(it->second.block_ids.size());
  return std::max<int64_t>(0, num_blocks_for(num_tokens) - have);
}

bool KvCacheManager::allocate(SeqId seq, int64_t num_computed, int64_t num_new,
                              const PrefixHit& hit, KvPrecision precision) {
  BlockTable& table = tables_[seq];
  OPTIMATE_CHECK(hit.block_ids.empty() || table.block_ids.empty(),
                 "sequence {} took a prefix hit while holding blocks", seq);
  const int64_t have = static_cast<int64_t>(table.block_ids.size() + hit.block_ids.size());
  const int64_t need = std::max<int64_t>(0, num_blocks_for(num_computed + num_new) - have);
  // Hit blocks that are free leave the free queues when touched, so they count against them:
  // in a paged cache touching one may take a whole empty page away from new blocks.
  const int64_t per_page = pool_.layout().page_slots / pool_.layout().slots_for(precision);
  int64_t free_hits = 0;
  for (int32_t id : hit.block_ids) free_hits += pool_.is_free(id) ? 1 : 0;
  if (need + free_hits * per_page > pool_.num_free_blocks(precision)) return false;

  pool_.touch(hit.block_ids);
  table.block_ids.insert(table.block_ids.end(), hit.block_ids.begin(), hit.block_ids.end());
  table.num_cached_blocks = std::max(table.num_cached_blocks,
                                     static_cast<int64_t>(hit.block_ids.size()));
  if (need > 0) {
    auto fresh = pool_.allocate(need, precision);
    OPTIMATE_CHECK(static_cast<int64_t>(fresh.size()) == need, "pool refused {} blocks", need);
    table.block_ids.insert(table.block_ids.end(), fresh.begin(), fresh.end());
  }
  return true;
}

void KvCacheManager::commit(SeqId seq, std::span<const int32_t> token_ids, int64_t num_computed) {
  if (!pool_.prefix_caching()) return;
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  BlockTable& table = it->second;
  const int64_t num_full = std::min<int64_t>(num_computed / block_size(),
                                             static_cast<int64_t>(table.block_ids.size()));
  if (num_full <= table.num_cached_blocks) return;
  extend_block_hashes(token_ids.first(static_cast<size_t>(num_full * block_size())), block_size(),
                      table.block_hashes);
  for (int64_t b = table.num_cached_blocks; b < num_full; ++b)
    pool_.cache_block(table.block_ids[b], table.block_hashes[b]);
  table.num_cached_blocks = num_full;
}

int64_t KvCacheManager::fork(SeqId parent, SeqId child, int64_t num_tokens) {
  auto it = tables_.find(parent);
  OPTIMATE_CHECK(it != tables_.end(), "fork from unknown sequence {}", parent);
  OPTIMATE_CHECK(!has(child) || tables_[child].block_ids.empty(),
                 "fork into sequence {} that holds blocks", child);
  const BlockTable& from = it->second;
  const int64_t num_full = std::min<int64_t>(num_tokens / block_size(),
                                             static_cast<int64_t>(from.block_ids.size()));
  BlockTable table;
  table.block_ids.assign(from.block_ids.begin(), from.block_ids.begin() + num_full);
  table.block_hashes.assign(from.block_hashes.begin(),
                            from.block_hashes.begin() +
                                std::min<int64_t>(num_full, static_cast<int64_t>(from.block_hashes.size())));
  table.num_cached_blocks = std::min(from.num_cached_blocks, num_full);
  pool_.touch(table.block_ids);
  tables_[child] = std::move(table);
  return num_full * block_size();
}

void KvCacheManager::free(SeqId seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  std::vector<int32_t> ids(it->second.block_ids.rbegin(), it->second.block_ids.rend());
  pool_.release(ids);
  tables_.erase(it);
}

RequantizeOp KvCacheManager::requantize(SeqId seq, int64_t index, KvPrecision precision) {
  auto it = tables_.find(seq);
  OPTIMATE_CHECK(it != tables_.end() && index >= 0 &&
                     index < static_cast<int64_t>(it->second.block_ids.size()),
                 "requantize: sequence {} has no block {}", seq, index);
  int32_t& entry = it->second.block_ids[index];
  const RequantizeOp op{entry, pool_.requantize(entry, precision)};
  entry = op.to_entry;
  return op;
}

std::span<const int32_t> KvCacheManager::block_ids(SeqId seq) const {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return {};
  return it->second.block_ids;
}

}  // namespace optimate::kv
