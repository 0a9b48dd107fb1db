#include "kv/block_pool.h"

#include <algorithm>

#include "core/error.h"
#include "kv/kv_format.h"

namespace optimate::kv {
namespace {

KvLayout static_f32_layout() {
  KvLayout l;
  l.full = KvPrecision::kF32;
  l.base = KvPrecision::kF32;
  return l;
}

}  // namespace

BlockPool::BlockPool(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching)
    : BlockPool(static_f32_layout(), num_blocks, block_size, enable_prefix_caching) {}

BlockPool::BlockPool(const KvLayout& layout, int64_t num_slots, int64_t block_size, bool enable_prefix_caching,
                     FreeSpaceOrder order)
    : layout_(layout), block_size_(block_size), prefix_caching_(enable_prefix_caching), order_(order) {
  const int64_t ps = layout_.page_slots;
  if (num_slots < ps || num_slots > kEntrySlotMask || num_slots % ps != 0)
    fail(ErrorCode::kInvalidArgument, "KV cache needs a whole number of pages of {} slots, between 1 and "
         "2^28 slots; got {}", ps, num_slots);
  if (block_size < 1 || block_size > 1024)
    fail(ErrorCode::kInvalidArgument, "block-size must be in [1, 1024], got {}", block_size);
  slots_.resize(static_cast<size_t>(num_slots));
  pages_.resize(static_cast<size_t>(num_slots / ps));
  empty_pages_.resize(static_cast<int64_t>(pages_.size()));
  // Only blocks smaller than a page share pages; sizes 1 .. page_slots - 1.
  partial_.resize(static_cast<size_t>(ps));
  for (int64_t size = 1; size < ps; ++size) partial_[size].resize(num_slots);
}

const BlockPool::Slot& BlockPool::block(int32_t entry) const {
  const int32_t slot = entry_slot(entry);
  if (entry >= 0 && slot < num_slots()) {
    const Slot& b = slots_[slot];
    if (b.size > 0 && precision_code(b.precision) == entry_code(entry)) return b;
    // A slot no block was ever carved from is free space: queries see a free block there.
    static const Slot kUnused{};
    if (b.size == 0 && entry_code(entry) == 0 && layout_.page_slots == 1) return kUnused;
  }
  fail(ErrorCode::kInternal, "KV entry {:#x} names no block of the pool", entry);
}

BlockPool::Slot& BlockPool::block(int32_t entry) {
  const Slot& b = static_cast<const BlockPool&>(*this).block(entry);
  if (b.size == 0) fail(ErrorCode::kInternal, "KV entry {:#x} was never allocated", entry);
  return const_cast<Slot&>(b);
}

int32_t BlockPool::entry_of(int32_t slot) const {
  return make_entry(precision_code(slots_[slot].precision), slot);
}

IndexQueue& BlockPool::partial_free(int32_t size) {
  OPTIMATE_CHECK(size > 0 && size < layout_.page_slots, "no partial queue for blocks of {} slots", size);
  return partial_[static_cast<size_t>(size)];
}

int64_t BlockPool::num_free_blocks(std::optional<KvPrecision> precision) const {
  const int64_t k = layout_.slots_for(precision.value_or(layout_.base));
  const int64_t in_pages = num_empty_pages() * (layout_.page_slots / k);
  return k < layout_.page_slots ? in_pages + partial_[k].size() : in_pages;
}

double BlockPool::usage() const {
  return static_cast<double>(live_slots_) / static_cast<double>(num_slots());
}

void BlockPool::evict(int32_t slot) {
  Slot& b = slots_[slot];
  if (!b.hash) return;
  auto it = cached_.find(*b.hash);
  if (it != cached_.end()) {
    std::erase(it->second, slot);
    if (it->second.empty()) cached_.erase(it);
  }
  if (record_evictions_) evicted_.push_back({entry_of(slot), *b.hash});
  b.hash.reset();
  --num_cached_blocks_;
  ++counters_.evictions;
}

void BlockPool::take(int32_t slot, KvPrecision precision) {
  evict(slot);
  Slot& b = slots_[slot];
  b.ref_count = 1;
  b.precision = precision;
  add_live_slots(page_of(slot), b.size);
  ++live_blocks_[precision];
}

void BlockPool::add_live_slots(int32_t page, int32_t delta) {
  Page& p = pages_[page];
  const bool was_live = p.live_slots > 0;
  p.live_slots += delta;
  live_slots_ += delta;
  if (was_live != (p.live_slots > 0)) num_live_pages_ += was_live ? -1 : 1;
  peak_live_pages_ = std::max(peak_live_pages_, num_live_pages_);
}

int32_t BlockPool::take_empty_page(int32_t size, KvPrecision precision) {
  const bool untouched_left = next_untouched_page_ < static_cast<int32_t>(pages_.size());
  const bool untouched_first =
      order_ == FreeSpaceOrder::kUntouchedFirst || next_untouched_page_ < 2 * peak_live_pages_;
  const bool untouched = untouched_left && (untouched_first || empty_pages_.empty());
  const int32_t page = untouched ? next_untouched_page_++ : empty_pages_.front();
  if (!untouched) empty_pages_.remove(page);
  const int32_t ps = static_cast<int32_t>(layout_.page_slots);
  const int32_t first = page * ps;
  for (int32_t s = first; s < first + ps; ++s) {
    if (slots_[s].size > 0) evict(s);
    slots_[s].size = 0;
  }
  pages_[page].block_slots = size;
  // The rest of the page: free blocks with nothing cached, so they go first.
  for (int32_t s = first + ps - size; s > first; s -= size) {
    slots_[s].size = size;
    slots_[s].ref_count = 0;
    partial_free(size).push_front(s);
  }
  slots_[first].size = size;
  take(first, precision);
  return first;
}

std::vector<int32_t> BlockPool::allocate(int64_t count, KvPrecision precision) {
  std::vector<int32_t> out;
  if (count <= 0 || num_free_blocks(precision) < count) return out;
  const int32_t size = static_cast<int32_t>(layout_.slots_for(precision));
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    int32_t slot;
    if (size < layout_.page_slots && !partial_free(size).empty()) {
      slot = partial_free(size).front();
      partial_free(size).remove(slot);
      take(slot, precision);
    } else {
      slot = take_empty_page(size, precision);
    }
    out.push_back(entry_of(slot));
  }
  return out;
}

std::vector<int32_t> BlockPool::allocate_each(std::span<const KvPrecision> precisions) {
  std::map<KvPrecision, std::vector<size_t>> by_precision;
  for (size_t i = 0; i < precisions.size(); ++i) by_precision[precisions[i]].push_back(i);
  std::vector<int32_t> out(precisions.size());
  std::vector<int32_t> taken;
  for (const auto& [precision, indices] : by_precision) {
    const std::vector<int32_t> got = allocate(static_cast<int64_t>(indices.size()), precision);
    if (got.empty()) {
      release(taken);
      return {};
    }
    for (size_t k = 0; k < indices.size(); ++k) out[indices[k]] = got[k];
    taken.insert(taken.end(), got.begin(), got.end());
  }
  return out;
}

void BlockPool::touch(std::span<const int32_t> entries) {
  for (int32_t e : entries) {
    Slot& b = block(e);
    const int32_t slot = entry_slot(e);
    if (b.ref_count == 0) {
      const int32_t page = page_of(slot);
      if (pages_[page].live_slots == 0) {
        // The page comes back to life: its other free blocks become partly-used-page blocks.
        empty_pages_.remove(page);
        const int32_t ps = static_cast<int32_t>(layout_.page_slots);
        for (int32_t s = page * ps; s < (page + 1) * ps; ++s)
          if (s != slot && slots_[s].size > 0 && slots_[s].size < ps) partial_free(slots_[s].size).push_back(s);
      } else {
        partial_free(b.size).remove(slot);
      }
      add_live_slots(page, b.size);
      ++live_blocks_[b.precision];
    }
    ++b.ref_count;
  }
}

void BlockPool::release(std::span<const int32_t> entries) {
  for (int32_t e : entries) {
    Slot& b = block(e);
    OPTIMATE_CHECK(b.ref_count > 0, "KV block {:#x} released more often than taken", e);
    if (--b.ref_count > 0) continue;
    const int32_t slot = entry_slot(e);
    const int32_t page = page_of(slot);
    add_live_slots(page, -b.size);
    --live_blocks_[b.precision];
    if (pages_[page].live_slots > 0) {
      partial_free(b.size).push_back(slot);
      continue;
    }
    // The page emptied: its free blocks leave the partial queue with it.
    const int32_t ps = static_cast<int32_t>(layout_.page_slots);
    for (int32_t s = page * ps; s < (page + 1) * ps; ++s)
      if (slots_[s].size > 0 && slots_[s].size < ps) partial_free(slots_[s].size).remove(s);
    empty_pages_.push_back(page);
  }
}

int32_t BlockPool::requantize(int32_t entry, KvPrecision precision) {
  Slot& b = block(entry);
  const int32_t slot = entry_slot(entry);
  if (!layout_.dynamic() || is_full_precision(precision) || !layout_.holds(precision))
    fail(ErrorCode::kInvalidArgument, "this KV cache cannot requantize to {}", kv_precision_name(precision));
  if (b.ref_count != 1 || !is_full_precision(b.precision))
    fail(ErrorCode::kInvalidArgument, "only a full-precision block held once is requantized (block {:#x}: "
         "{} references, {})", entry, b.ref_count, kv_precision_name(b.precision));
  const int32_t size = static_cast<int32_t>(layout_.slots_for(precision));
  if (size < layout_.page_slots && !partial_free(size).empty() && !slots_[partial_free(size).front()].hash) {
    // A free block of the new size in a live page takes the content, and the full block's whole
    // page is freed for full-precision blocks (new blocks are allocated at full precision). The
    // old bytes are not touched: the full-precision copy stays cached until its space is taken.
    const int32_t to = partial_free(size).front();
    partial_free(size).remove(to);
    take(to, precision);
    const std::optional<BlockHash> hash = b.hash;
    release(std::span(&entry, 1));
    if (hash) {
      slots_[to].hash = hash;
      cached_[*hash].push_back(to);
      ++num_cached_blocks_;
    }
    ++counters_.requantized_blocks;
    ++counters_.requantized_to[precision];
    return entry_of(to);
  }
  const int32_t page = page_of(slot);
  const int32_t old_size = b.size;  // a full block fills its page
  const int32_t freed = old_size - size;
  --live_blocks_[b.precision];
  ++live_blocks_[precision];
  b.precision = precision;
  b.size = size;
  for (int32_t s = slot + old_size - size; s > slot; s -= size) {
    slots_[s].size = size;
    slots_[s].ref_count = 0;
    slots_[s].hash.reset();
    partial_free(size).push_front(s);
  }
  pages_[page].block_slots = size;
  add_live_slots(page, -freed);
  ++counters_.requantized_blocks;
  ++counters_.requantized_to[precision];
  return entry_of(slot);
}

std::optional<int32_t> BlockPool::cached_block(BlockHash hash, bool full_only) const {
  if (!prefix_caching_) return std::nullopt;
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  std::optional<int32_t> free_copy;
  for (int32_t slot : it->second) {
    const Slot& b = slots_[slot];
    if (full_only && !is_full_precision(b.precision)) continue;
    if (b.ref_count > 0) return entry_of(slot);
    if (!free_copy) free_copy = entry_of(slot);
  }
  return free_copy;
}

void BlockPool::cache_block(int32_t entry, BlockHash hash) {
  if (!prefix_caching_) return;
  Slot& b = block(entry);
  if (b.hash) return;
  cached_[hash].push_back(entry_slot(entry));
  b.hash = hash;
  ++num_cached_blocks_;
}

void BlockPool::count_prefix_lookup(int64_t query_tokens, int64_t hit_tokens) {
  counters_.prefix_queries_tokens += query_tokens;
  counters_.prefix_hits_tokens += hit_tokens;
}

void BlockPool::reset_prefix_cache() {
  for (auto& s : slots_) s.hash.reset();
  cached_.clear();
  num_cached_blocks_ = 0;
}

}  // namespace optimate::kv
