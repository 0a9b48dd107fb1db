// Precision of the K/V values stored in one cache block. Every block carries a tag, so one
// cache can mix precisions block by block (kv/kv_format.h has the byte layout of each).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/setting_choices.h"  // KvCacheDtype

namespace optimate::kv {

enum class KvPrecision : uint8_t { kF32, kBF16, kFP8, kInt8, kInt4 };

const char* kv_precision_name(KvPrecision precision);

// The precision --kv-cache-dtype names; auto is `model_default`.
KvPrecision kv_precision_for(KvCacheDtype dtype, KvPrecision model_default);

// Storage per element, in bits (int4 packs two per byte), scales not counted.
int64_t kv_precision_bits(KvPrecision precision);

// f32 and bf16 are full precision (a runner stores one of them natively); fp8, int8 and int4
// are quantized with per-row scales.
inline bool is_full_precision(KvPrecision p) {
  return p == KvPrecision::kF32 || p == KvPrecision::kBF16;
}

// Blocks that fit in `bytes` of KV memory: one block holds K and V of `block_size` tokens for
// every layer and KV head, scales included (kv_format.h). Throws Error(kInvalidArgument) when
// not even one block fits.
int64_t num_blocks_for_memory(int64_t bytes, int64_t num_layers, int64_t num_kv_heads,
                              int64_t head_dim, int64_t block_size, KvPrecision precision);

}  // namespace optimate::kv
