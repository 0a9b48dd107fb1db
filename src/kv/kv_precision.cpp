#include "kv/kv_precision.h"

#include <string>

#include "core/error.h"
#include "kv/kv_format.h"

namespace optimate::kv {

const char* kv_precision_name(KvPrecision precision) {
  switch (precision) {
    case KvPrecision::kF32: return "f32";
    case KvPrecision::kBF16: return "bf16";
    case KvPrecision::kFP8: return "fp8";
    case KvPrecision::kInt8: return "int8";
    case KvPrecision::kInt4: return "int4";
  }
  return "?";
}

KvPrecision kv_precision_for(KvCacheDtype dtype, KvPrecision model_default) {
  switch (dtype) {
    case KvCacheDtype::kAuto: return model_default;
    case KvCacheDtype::kF32: return KvPrecision::kF32;
    case KvCacheDtype::kBF16: return KvPrecision::kBF16;
    case KvCacheDtype::kFP8: return KvPrecision::kFP8;
    case KvCacheDtype::kInt8: return KvPrecision::kInt8;
    case KvCacheDtype::kInt4: return KvPrecision::kInt4;
  }
  return model_default;
}

int64_t kv_precision_bits(KvPrecision precision) {
  switch (precision) {
    case KvPrecision::kF32: return 32;
    case KvPrecision::kBF16: return 16;
    case KvPrecision::kFP8: return 8;
    case KvPrecision::kInt8: return 8;
    case KvPrecision::kInt4: return 4;
  }
  return 32;
}

int64_t num_blocks_for_memory(int64_t bytes, int64_t num_layers, int64_t num_kv_heads,
                              int64_t head_dim, int64_t block_size, KvPrecision precision) {
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0 || block_size <= 0)
    fail(ErrorCode::kInvalidArgument, "KV cache shape must be positive (layers {}, kv heads {}, "
         "head dim {}, block size {})", num_layers, num_kv_heads, head_dim, block_size);
  // K and V, every layer, scales included.
  const int64_t bytes_per_block =
      2 * num_layers * BlockLayout(precision, num_kv_heads, block_size, head_dim).total_bytes;
  const int64_t num_blocks = bytes / bytes_per_block;
  if (num_blocks < 1)
    fail(ErrorCode::kInvalidArgument,
         "kv-cache-memory of {} bytes holds no KV block ({} bytes each at {})", bytes,
         bytes_per_block, kv_precision_name(precision));
  return num_blocks;
}

}  // namespace optimate::kv
