#include "kv/kv_layout.h"

#include <algorithm>

#include "core/error.h"
#include "kv/kv_format.h"

namespace optimate::kv {
namespace {

constexpr int64_t kSlotAlign = 128;  // bytes: every slot starts on a cache line

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

bool KvLayout::holds(KvPrecision p) const {
  // Full-precision blocks are the runner's own precision whatever their tag (entry code 0).
  if (is_full_precision(p) || p == base) return true;
  if (!finest || is_full_precision(p)) return false;
  // A finer precision than the layout's finest would not fit in one slot.
  return kv_precision_bits(p) >= kv_precision_bits(*finest);
}

int64_t KvLayout::slots_for(KvPrecision p) const {
  if (!holds(p))
    fail(ErrorCode::kInvalidArgument, "this KV cache holds no {} blocks (full {}, base {}{})",
         kv_precision_name(p), kv_precision_name(full), kv_precision_name(base),
         finest ? std::string(", finest ") + kv_precision_name(*finest) : std::string());
  if (!finest) return 1;
  if (is_full_precision(p)) return page_slots;
  // An 8-bit block takes half a page; an int4 block a quarter (pages of 4) or a third (of 6).
  return kv_precision_bits(p) == 4 ? page_slots / (page_slots == 6 ? 3 : 4) : page_slots / 2;
}

KvLayout plan_kv_layout(KvPrecision full, KvPrecision base, std::optional<KvPrecision> finest,
                        int64_t kvh, int64_t bs, int64_t hd, Int4Keys int4_keys) {
  if (!is_full_precision(full))
    fail(ErrorCode::kInternal, "a runner's own KV precision must be f32 or bf16, not {}", kv_precision_name(full));
  if (int4_keys == Int4Keys::kPerChannel && finest != KvPrecision::kInt4)
    fail(ErrorCode::kInvalidArgument, "int4 keys scaled per channel need kv_quant with bits = 4");
  KvLayout l;
  l.full = full;
  l.base = base;
  l.int4_keys = int4_keys;
  auto bytes = [&](KvPrecision p) {
    return std::max(BlockLayout(p, kvh, bs, hd).total_bytes, BlockLayout(p, kvh, bs, hd, int4_keys).total_bytes);
  };
  if (!finest) {
    l.slot_bytes = round_up(bytes(base), kSlotAlign);
    return l;
  }
  if (is_full_precision(*finest))
    fail(ErrorCode::kInvalidArgument, "kv_quant needs a quantized precision (fp8, int8, int4), not {}",
         kv_precision_name(*finest));
  if (!is_full_precision(base))
    fail(ErrorCode::kInvalidArgument, "kv_quant starts from full-precision blocks: use kv-cache-dtype "
         "auto, f32 or bf16 with it, not {}", kv_precision_name(base));
  l.finest = finest;
  l.page_slots = kv_precision_bits(*finest) == 8 ? 2 : int4_keys == Int4Keys::kPerChannel ? 6 : 4;
  int64_t slot = ceil_div(bytes(full), l.page_slots);
  for (KvPrecision p : {KvPrecision::kFP8, KvPrecision::kInt8, KvPrecision::kInt4})
    if (l.holds(p)) slot = std::max(slot, ceil_div(bytes(p), l.slots_for(p)));
  l.slot_bytes = round_up(slot, kSlotAlign);
  return l;
}

KvBlockFormats::KvBlockFormats(const KvLayout& layout, int64_t kvh, int64_t bs, int64_t hd) {
  for (KvPrecision p : {layout.full, KvPrecision::kFP8, KvPrecision::kInt8, KvPrecision::kInt4}) {
    if (!layout.holds(p)) continue;
    k[precision_code(p)].emplace(p, kvh, bs, hd, layout.int4_keys);
    v[precision_code(p)].emplace(p, kvh, bs, hd);
  }
}

namespace {
const BlockLayout& format_of(const std::array<std::optional<BlockLayout>, 4>& formats, int32_t entry) {
  const int32_t code = entry_code(entry);
  if (code < 0 || code >= 4 || !formats[code])
    fail(ErrorCode::kInvalidArgument, "KV entry {:#x} names a precision this cache does not hold", entry);
  return *formats[code];
}
}  // namespace

const BlockLayout& KvBlockFormats::key(int32_t entry) const { return format_of(k, entry); }
const BlockLayout& KvBlockFormats::value(int32_t entry) const { return format_of(v, entry); }

int64_t num_slots_for_memory(int64_t bytes, int64_t num_layers, const KvLayout& layout) {
  const int64_t per_slot = 2 * num_layers * layout.slot_bytes;
  const int64_t pages = bytes / (per_slot * layout.page_slots);
  if (pages < 1)
    fail(ErrorCode::kInvalidArgument, "kv-cache-memory of {} bytes holds no KV block ({} bytes each)",
         bytes, per_slot * layout.page_slots);
  return pages * layout.page_slots;
}

}  // namespace optimate::kv
