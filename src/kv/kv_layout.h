// How a runner sizes its KV arenas: the bytes of one slot, and how many slots each precision's
// block takes. Decided once at start from --kv-cache-dtype and the kv_quant optimizer's bits.
//
//   static cache (no kv_quant): every block has the cache's precision (`base`) and takes one
//     slot of exactly its bytes, so an int8 cache holds ~1.94x the tokens of a bf16 one and an
//     int4 cache ~3.56x (scales included, kv_format.h).
//   dynamic cache (kv_quant configured): a page of `page_slots` slots holds one full-precision
//     block, or 2 fp8/int8 blocks, or 4 int4 blocks (page_slots is 2 when the finest precision
//     is 8-bit, 4 when it is int4). Requantizing a full block in place frees the rest of its
//     page; the slots are sized so every precision's block (scales included) fits.
#pragma once

#include <cstdint>
#include <optional>

#include "kv/kv_precision.h"

namespace optimate::kv {

struct KvLayout {
  KvPrecision full = KvPrecision::kBF16;  // the runner's native precision: entry code 0
  KvPrecision base = KvPrecision::kBF16;  // precision of newly allocated blocks by default
  std::optional<KvPrecision> finest;      // the dynamic cache's finest precision; none: static
  int64_t slot_bytes = 0;                 // one slot of K (V the same) of one layer
  int64_t page_slots = 1;

  bool dynamic() const { return finest.has_value(); }
  // Slots a block of `precision` takes (1, 2 or page_slots); throws Error(kInvalidArgument)
  // for a precision this layout cannot hold. f32 and bf16 both name the runner's full
  // precision (entry code 0).
  int64_t slots_for(KvPrecision precision) const;
  bool holds(KvPrecision precision) const;
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
// quantized cache); `finest`: the kv_quant optimizer's precision, when configured.
KvLayout plan_kv_layout(KvPrecision full, KvPrecision base, std::optional<KvPrecision> finest,
                        int64_t num_kv_heads, int64_t block_size, int64_t head_dim);

// Slots that fit in `bytes` (K and V of every layer); throws Error(kInvalidArgument) when not
// one page fits.
int64_t num_slots_for_memory(int64_t bytes, int64_t num_layers, const KvLayout& layout);

}  // namespace optimate::kv
