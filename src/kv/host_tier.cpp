#include "kv/host_tier.h"

#include <algorithm>

#include "core/error.h"
#include "kv/kv_format.h"

namespace optimate::kv {

HostTierSlots plan_host_tier(int64_t swap_bytes, int64_t prefix_bytes, int64_t num_layers, const KvLayout& layout,
                             int64_t max_slots) {
  const int64_t per_page = 2 * num_layers * layout.slot_bytes * layout.page_slots;
  if (per_page <= 0) return {};
  const int64_t max_pages = std::max<int64_t>(0, max_slots) / layout.page_slots;
  const int64_t swap_pages = std::min(std::max<int64_t>(0, swap_bytes) / per_page, max_pages);
  const int64_t prefix_pages = std::min(std::max<int64_t>(0, prefix_bytes) / per_page, max_pages - swap_pages);
  return {swap_pages * layout.page_slots, prefix_pages * layout.page_slots};
}

HostTier::HostTier(const KvLayout& layout, HostTierSlots slots, int64_t block_size) : slots_(slots) {
  if (slots.swap < 0 || slots.prefix < 0 || slots.swap + slots.prefix > kEntrySlotMask)
    fail(ErrorCode::kInvalidArgument, "host KV tier of {} + {} slots: need 0 to 2^28 slots", slots.swap,
         slots.prefix);
  if (slots.swap > 0) swap_.emplace(layout, slots.swap, block_size, /*enable_prefix_caching=*/false);
  if (slots.prefix > 0) prefix_.emplace(layout, slots.prefix, block_size, /*enable_prefix_caching=*/true);
}

std::vector<int32_t> HostTier::allocate_swap(std::span<const KvPrecision> precisions) {
  if (!swap_) return {};
  return swap_->allocate_each(precisions);
}

void HostTier::release_swap(std::span<const int32_t> entries) {
  OPTIMATE_CHECK(swap_ || entries.empty(), "host swap blocks released without a swap region");
  if (swap_) swap_->release(entries);
}

int64_t HostTier::num_free_swap_blocks() const { return swap_ ? swap_->num_free_blocks() : 0; }

std::optional<int32_t> HostTier::find_prefix(BlockHash hash, bool full_only) const {
  if (!prefix_) return std::nullopt;
  return prefix_->cached_block(hash, full_only);
}

std::optional<int32_t> HostTier::store_prefix(BlockHash hash, KvPrecision precision) {
  if (!prefix_ || !prefix_->layout().holds(precision)) return std::nullopt;
  if (auto have = prefix_->cached_block(hash); have && prefix_->precision(*have) == precision) {
    // Already here: touching and releasing moves it to the back of the LRU order.
    const int32_t e[] = {*have};
    prefix_->touch(e);
    prefix_->release(e);
    return std::nullopt;
  }
  const std::vector<int32_t> got = prefix_->allocate(1, precision);
  if (got.empty()) return std::nullopt;  // every block pinned by this step's restores
  prefix_->cache_block(got[0], hash);
  prefix_->release(got);
  return got[0];
}

void HostTier::pin_prefix(std::span<const int32_t> entries) {
  if (prefix_) prefix_->touch(entries);
}

void HostTier::unpin_prefix(std::span<const int32_t> entries) {
  if (prefix_) prefix_->release(entries);
}

void HostTier::reset_prefix_cache() {
  if (prefix_) prefix_->reset_prefix_cache();
}

}  // namespace optimate::kv
