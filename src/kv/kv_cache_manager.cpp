#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "core/error.h"
#include "core/logging.h"

namespace optimate::kv {

KvCacheManager::KvCacheManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching)
    : pool_(num_blocks, block_size, enable_prefix_caching), host_(pool_.layout(), {}, block_size) {}

KvCacheManager::KvCacheManager(const KvLayout& layout, int64_t num_slots, int64_t block_size,
                               bool enable_prefix_caching, HostTierSlots host, FreeSpaceOrder order)
    : pool_(layout, num_slots, block_size, enable_prefix_caching, order),
      host_(layout, enable_prefix_caching ? host : HostTierSlots{host.swap, 0}, block_size) {
  pool_.record_evictions(host_.has_prefix());
}

PrefixHit KvCacheManager::find_cached_prefix(SeqId seq, std::span<const int32_t> token_ids,
                                             std::optional<KvPrecision> precision) {
  PrefixHit hit;
  if (!pool_.prefix_caching() || token_ids.empty()) return hit;
  BlockTable& table = tables_[seq];
  extend_block_hashes(token_ids, block_size(), table.block_hashes);
  const int64_t max_blocks = (static_cast<int64_t>(token_ids.size()) - 1) / block_size();
  const bool full_only = precision && is_full_precision(*precision);
  int64_t b = 0;
  for (; b < max_blocks; ++b) {
    auto id = pool_.cached_block(table.block_hashes[b], full_only);
    if (!id) break;
    hit.block_ids.push_back(*id);
  }
  for (; b < max_blocks; ++b) {
    auto id = host_.find_prefix(table.block_hashes[b], full_only);
    if (!id) break;
    hit.host_block_ids.push_back(*id);
  }
  hit.num_device_tokens = static_cast<int64_t>(hit.block_ids.size()) * block_size();
  hit.num_tokens = hit.num_device_tokens + static_cast<int64_t>(hit.host_block_ids.size()) * block_size();
  return hit;
}

void KvCacheManager::record_prefix_lookup(int64_t query_tokens, const PrefixHit& hit) {
  pool_.count_prefix_lookup(query_tokens, hit.num_device_tokens);
  if (!host_.has_prefix()) return;
  counters_.host_prefix_queries_tokens += query_tokens - hit.num_device_tokens;
  counters_.host_prefix_hits_tokens += hit.num_tokens - hit.num_device_tokens;
}

void KvCacheManager::keep_evicted() {
  for (const EvictedBlock& e : pool_.take_evicted()) {
    const KvPrecision p = precision_of(e.entry);
    const std::optional<int32_t> host = host_.store_prefix(e.hash, p);
    if (!host) continue;
    copies_.push_back({CopyDirection::kToHost, entry_slot(e.entry), host_.prefix_slot(*host), slots_of(e.entry)});
    ++counters_.host_prefix_stored_blocks;
  }
}

std::vector<int32_t> KvCacheManager::restore(std::span<const int32_t> host_ids, std::span<const BlockHash> hashes) {
  if (host_ids.empty()) return {};
  // Pinned while the device blocks are taken: an eviction kept on the way must not land on them.
  host_.pin_prefix(host_ids);
  std::vector<KvPrecision> precisions;
  for (int32_t h : host_ids) precisions.push_back(precision_of(h));
  const std::vector<int32_t> ids = pool_.allocate_each(precisions);
  keep_evicted();
  for (size_t i = 0; i < ids.size(); ++i) {
    copies_.push_back({CopyDirection::kToDevice, entry_slot(ids[i]), host_.prefix_slot(host_ids[i]),
                       slots_of(ids[i])});
    pool_.cache_block(ids[i], hashes[i]);
  }
  host_.unpin_prefix(host_ids);
  return ids;
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
  const int64_t num_restored = static_cast<int64_t>(hit.host_block_ids.size());
  const int64_t have = static_cast<int64_t>(table.block_ids.size() + hit.block_ids.size()) + num_restored;
  const int64_t need = std::max<int64_t>(0, num_blocks_for(num_computed + num_new) - have);
  // Hit blocks that are free leave the free queues when touched, so they count against them:
  // in a paged cache touching one may take a whole empty page away from new blocks.
  const int64_t per_page = pool_.layout().page_slots / pool_.layout().slots_for(precision);
  int64_t free_hits = 0;
  for (int32_t id : hit.block_ids) free_hits += pool_.is_free(id) ? 1 : 0;
  if (need + num_restored + free_hits * per_page > pool_.num_free_blocks(precision)) return false;

  pool_.touch(hit.block_ids);
  const size_t first_hit = hit.host_block_ids.empty() ? 0 : static_cast<size_t>(hit.block_ids.size());
  const std::vector<int32_t> restored =
      restore(hit.host_block_ids, std::span<const BlockHash>(table.block_hashes).subspan(first_hit, hit.host_block_ids.size()));
  std::vector<int32_t> fresh;
  if (need > 0) {
    fresh = pool_.allocate(need, precision);
    keep_evicted();
  }
  if (static_cast<int64_t>(restored.size()) != num_restored || static_cast<int64_t>(fresh.size()) != need) {
    // Blocks of mixed precisions packed worse than counted: give everything back.
    std::vector<int32_t> back(fresh.rbegin(), fresh.rend());
    back.insert(back.end(), restored.rbegin(), restored.rend());
    back.insert(back.end(), hit.block_ids.rbegin(), hit.block_ids.rend());
    pool_.release(back);
    return false;
  }
  table.block_ids.insert(table.block_ids.end(), hit.block_ids.begin(), hit.block_ids.end());
  table.block_ids.insert(table.block_ids.end(), restored.begin(), restored.end());
  table.num_cached_blocks = std::max(table.num_cached_blocks,
                                     static_cast<int64_t>(hit.block_ids.size() + restored.size()));
  table.block_ids.insert(table.block_ids.end(), fresh.begin(), fresh.end());
  if (need + num_restored + static_cast<int64_t>(hit.block_ids.size()) > 0)
    spdlog::debug("KV pool: sequence {} grows by {} {} blocks ({} prefix-cache hits, {} restored from the host tier) "
                  "to {}; {:.1f}% of the pool in use", seq, need, kv_precision_name(precision), hit.block_ids.size(),
                  num_restored, table.block_ids.size(), 100.0 * pool_.usage());
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
  if (auto s = swapped_.find(seq); s != swapped_.end()) {
    host_.release_swap(s->second.host_ids);
    swapped_.erase(s);
  }
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  std::vector<int32_t> ids(it->second.block_ids.rbegin(), it->second.block_ids.rend());
  pool_.release(ids);
  tables_.erase(it);
  if (!ids.empty())
    spdlog::debug("KV pool: sequence {} releases {} blocks; {:.1f}% of the pool in use", seq, ids.size(),
                  100.0 * pool_.usage());
}

int64_t KvCacheManager::num_slots_for_tokens(SeqId seq, int64_t num_computed) const {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return 0;
  const auto& ids = it->second.block_ids;
  const int64_t n = std::min<int64_t>(num_blocks_for(num_computed), static_cast<int64_t>(ids.size()));
  int64_t slots = 0;
  for (int64_t b = 0; b < n; ++b) slots += slots_of(ids[b]);
  return slots;
}

bool KvCacheManager::swap_out(SeqId seq, int64_t num_computed) {
  auto it = tables_.find(seq);
  if (it == tables_.end() || !host_.has_swap()) return false;
  BlockTable& table = it->second;
  const int64_t n = std::min<int64_t>(num_blocks_for(num_computed), static_cast<int64_t>(table.block_ids.size()));
  if (n == 0) return false;
  std::vector<KvPrecision> precisions;
  for (int64_t b = 0; b < n; ++b) precisions.push_back(precision_of(table.block_ids[b]));
  SwappedTable out;
  out.host_ids = host_.allocate_swap(precisions);
  if (out.host_ids.empty()) return false;
  for (int64_t b = 0; b < n; ++b) {
    const int32_t e = table.block_ids[b];
    copies_.push_back({CopyDirection::kToHost, entry_slot(e), host_.swap_slot(out.host_ids[b]), slots_of(e)});
  }
  out.block_hashes = std::move(table.block_hashes);
  free(seq);
  swapped_.emplace(seq, std::move(out));
  counters_.swapped_out_blocks += n;
  return true;
}

bool KvCacheManager::swap_in(SeqId seq) {
  auto it = swapped_.find(seq);
  OPTIMATE_CHECK(it != swapped_.end() && !has(seq), "swap_in: sequence {} is not swapped out", seq);
  const SwappedTable& s = it->second;
  std::vector<KvPrecision> precisions;
  for (int32_t h : s.host_ids) precisions.push_back(precision_of(h));
  std::vector<int32_t> ids = pool_.allocate_each(precisions);
  keep_evicted();
  if (ids.empty()) return false;
  for (size_t b = 0; b < ids.size(); ++b)
    copies_.push_back({CopyDirection::kToDevice, entry_slot(ids[b]), host_.swap_slot(s.host_ids[b]), slots_of(ids[b])});
  host_.release_swap(s.host_ids);
  counters_.swapped_in_blocks += static_cast<int64_t>(ids.size());
  // The blocks are new: commit() registers them in the prefix cache again.
  BlockTable table;
  table.block_ids = std::move(ids);
  table.block_hashes = std::move(it->second.block_hashes);
  swapped_.erase(it);
  tables_.emplace(seq, std::move(table));
  return true;
}

void KvCacheManager::reset_prefix_cache() {
  pool_.reset_prefix_cache();
  host_.reset_prefix_cache();
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
