// How a runner sizes its KV arenas: the bytes of one slot, and how many slots each precision's
// block takes. Decided once at start from --kv-cache-dtype and the kv_quant optimizer's bits.
//
//   static cache (no kv_quant): every block has the cache's precision (`base`) and takes one
//     slot of exactly its bytes, so an int8 cache holds ~1.94x the tokens of a bf16 one and an
//     int4 cache ~3.56x (scales included, kv_format.h).
//   dynamic cache (kv_quant configured): a page of `page_slots` slots holds one full-precision
//     block, or 2 fp8/int8 blocks, or int4 blocks: 4 with per-token key scales (page_slots 4),
//     3 with per-channel ones (page_slots 6: an int4 block takes 2 slots, an 8-bit one 3; the
//     keys' scales take an int4 block past a quarter of a full one). page_slots is 2 when the
//     finest precision is 8-bit. Requantizing a full block in place frees the rest of its page;
//     the slots are sized so every precision's block (scales included) fits.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "kv/kv_format.h"
#include "kv/kv_precision.h"

namespace optimate::kv {

struct KvLayout {
  KvPrecision full = KvPrecision::kBF16;  // the runner's native precision: entry code 0
  KvPrecision base = KvPrecision::kBF16;  // precision of newly allocated blocks by default
  std::optional<KvPrecision> finest;      // the dynamic cache's finest precision; none: static
  int64_t slot_bytes = 0;                 // one slot of K (V the same) of one layer
  int64_t page_slots = 1;
  // How int4 blocks scale their keys: per channel only in a dynamic cache asked to (its int4
  // blocks are made whole from full-precision ones); a static int4 cache writes token by token.
  Int4Keys int4_keys = Int4Keys::kPerToken;

  // A static cache of one full precision, before plan_kv_layout sizes its slots.
  static KvLayout of(KvPrecision precision) {
    KvLayout l;
    l.full = l.base = precision;
    return l;
  }

  bool dynamic() const { return finest.has_value(); }
  // Slots a block of `precision` takes (1, 2 or page_slots); throws Error(kInvalidArgument)
  // for a precision this layout cannot hold. f32 and bf16 both name the runner's full
  // precision (entry code 0).
  int64_t slots_for(KvPrecision precision) const;
  bool holds(KvPrecision precision) const;
};

// The K and V block formats of every precision code a layout holds (kv_format.h: code 0 is
// the layout's full precision).
struct KvBlockFormats {
  std::array<std::optional<BlockLayout>, 4> k, v;  // by entry code

  KvBlockFormats() = default;
  KvBlockFormats(const KvLayout& layout, int64_t num_kv_heads, int64_t block_size, int64_t head_dim);
  // Error(kInvalidArgument) for an entry whose precision the layout does not hold.
  const BlockLayout& key(int32_t entry) const;
  const BlockLayout& value(int32_t entry) const;
};

// Which space the block pool (kv/block_pool.h) hands out first once no partly used page fits.
//   kUntouchedFirst  pages never used, then the least recently freed: a freed block that holds a
//                    cached prefix survives as long as the pool has other space (vLLM's order);
//                    right for arenas allocated up front (the GPU's).
//   kFreedFirst      for arenas whose memory the OS maps on first write (the CPU's), where
//                    untouched space costs nothing until used: untouched pages only while the
//                    pages used so far are fewer than twice the most pages ever live at once,
//                    then the least recently freed pages first. Resident memory stays within
//                    twice the peak of live blocks instead of growing toward the whole arena as
//                    the prefix cache fills it; the cache keeps as much as the engine has
//                    needed at once, the most recently freed blocks.
enum class FreeSpaceOrder { kUntouchedFirst, kFreedFirst };

// `full`: f32 or bf16; `base`: the cache's precision (full, or a quantized one for a static
// quantized cache); `finest`: the kv_quant optimizer's precision, when configured; `int4_keys`:
// how a dynamic cache's int4 blocks scale their keys (Error(kInvalidArgument) for per-channel
// keys without int4 as the finest precision).
KvLayout plan_kv_layout(KvPrecision full, KvPrecision base, std::optional<KvPrecision> finest,
                        int64_t num_kv_heads, int64_t block_size, int64_t head_dim,
                        Int4Keys int4_keys = Int4Keys::kPerToken);

// Slots that fit in `bytes` (K and V of every layer); throws Error(kInvalidArgument) when not
// one page fits.
int64_t num_slots_for_memory(int64_t bytes, int64_t num_layers, const KvLayout& layout);

}  // namespace optimate::kv
