// Precision of the K/V values stored in one cache block. Every block carries a tag from the
// start so that mixed-precision caches (some blocks int8/int4 with scales) need no redesign;
// today only the full-precision tags are produced.
#pragma once

#include <cstdint>
#include <string_view>

namespace optimate::kv {

enum class KvPrecision : uint8_t { kF32, kBF16, kInt8, kInt4 };

const char* kv_precision_name(KvPrecision precision);

// Accepts vLLM's --kv-cache-dtype names ("auto" resolves to `model_default`) and our own
// ("f32"/"float32", "bf16"/"bfloat16", "int8", "int4"). Throws Error(kInvalidArgument).
KvPrecision parse_kv_precision(std::string_view name, KvPrecision model_default);

// Storage per element, in bits (int4 packs two per byte).
int64_t kv_precision_bits(KvPrecision precision);

// Full precision is what the backends store today; quantized tags come with KV quantization.
inline bool is_full_precision(KvPrecision p) {
  return p == KvPrecision::kF32 || p == KvPrecision::kBF16;
}

// Blocks that fit in `bytes` of KV memory: one block holds K and V of `block_size` tokens for
// every layer and KV head. Throws Error(kInvalidArgument) when not even one block fits.
int64_t num_blocks_for_memory(int64_t bytes, int64_t num_layers, int64_t num_kv_heads,
                              int64_t head_dim, int64_t block_size, KvPrecision precision);

}  // namespace optimate::kv
