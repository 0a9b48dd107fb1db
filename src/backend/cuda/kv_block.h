// Where a token's head row lives inside a KV block, per precision code, for the kernels and
// their host code alike: the CUDA runner's reading of kv/kv_format.h (its BlockLayout with the
// runner's full precision, bf16), checked against BlockLayout by tests/cuda_host.
//
// A block-table entry is code << 28 | slot (kv_format.h); the block's bytes start at
// arena + slot * slot_bytes. The step's slot_mapping uses the same top bits:
// code << 28 | (slot * block_size + token in block), or -1 for "write nothing".
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "kv/kv_format.h"

#ifndef OPTIMATE_HOST_DEVICE  // as sampling/rng.h defines it
#if defined(__CUDACC__)
#define OPTIMATE_HOST_DEVICE __host__ __device__
#else
#define OPTIMATE_HOST_DEVICE
#endif
#endif

namespace optimate::cuda {

// Precision codes of block-table entries (kv::precision_code; 0 is the runner's bf16).
inline constexpr int kKvBf16 = 0;
inline constexpr int kKvFp8 = 1;
inline constexpr int kKvInt8 = 2;
inline constexpr int kKvInt4 = 3;
static_assert(kv::kInt4Group == 64, "the kernels take int4 groups of 64 elements");

OPTIMATE_HOST_DEVICE inline int kv_entry_code(int32_t entry) {
  return static_cast<int>(static_cast<uint32_t>(entry) >> kv::kEntryCodeShift);
}
OPTIMATE_HOST_DEVICE inline int32_t kv_entry_slot(int32_t entry) { return entry & kv::kEntrySlotMask; }

// Bytes of one token's head row of codes, and of its scales.
OPTIMATE_HOST_DEVICE inline int kv_row_bytes(int code, int head_dim) {
  return code == kKvBf16 ? 2 * head_dim : code == kKvInt4 ? head_dim / 2 : head_dim;
}
OPTIMATE_HOST_DEVICE inline int kv_scale_bytes(int code, int head_dim) {
  return code == kKvBf16 ? 0 : code == kKvInt4 ? 4 * (head_dim / 64) : 4;
}

// Offsets inside a block of [num_kv_heads][block_size] rows: codes first, then scales.
OPTIMATE_HOST_DEVICE inline int64_t kv_codes_offset(int code, int block_size, int head_dim, int head, int token) {
  return (static_cast<int64_t>(head) * block_size + token) * kv_row_bytes(code, head_dim);
}
OPTIMATE_HOST_DEVICE inline int64_t kv_scales_offset(int code, int num_kv_heads, int block_size, int head_dim,
                                              int head, int token) {
  return static_cast<int64_t>(num_kv_heads) * block_size * kv_row_bytes(code, head_dim) +
         (static_cast<int64_t>(head) * block_size + token) * kv_scale_bytes(code, head_dim);
}

// A slot_mapping value and its parts.
OPTIMATE_HOST_DEVICE inline int32_t kv_write_target(int code, int32_t slot, int block_size, int token) {
  return static_cast<int32_t>((static_cast<uint32_t>(code) << kv::kEntryCodeShift) |
                              static_cast<uint32_t>(slot * block_size + token));
}
OPTIMATE_HOST_DEVICE inline int kv_target_code(int32_t target) { return kv_entry_code(target); }
OPTIMATE_HOST_DEVICE inline int32_t kv_target_row(int32_t target) { return target & kv::kEntrySlotMask; }

// The bytes of a bf16 block: what slot_bytes must equal when the cache holds bf16 blocks only
// (kernels built for that case index the arena as bf16 elements).
OPTIMATE_HOST_DEVICE inline int64_t kv_bf16_block_bytes(int64_t num_kv_heads, int64_t block_size, int64_t head_dim) {
  return num_kv_heads * block_size * head_dim * 2;
}

// One layer's K and V arenas as the kernels address them. With `quantized` false every block
// is bf16 and slot_bytes is the bf16 block's bytes, so kernels keep plain bf16 indexing; with
// it true they read each entry's precision code, and blocks may be any precision (a bf16 block
// of a dynamic cache spans several slots). `uniform_code`, when not -1, promises that every
// block has that code (a static fp8, int8 or int4 cache): decode attention then runs a kernel
// built for that precision alone, whose registers hold only its codes.
struct KvArena {
  uint8_t* k = nullptr;  // [num_slots, slot_bytes]
  uint8_t* v = nullptr;
  int64_t slot_bytes = 0;
  bool quantized = false;
  int uniform_code = -1;
};

// The launchers' check of an arena against the cache shape.
inline void check_kv_arena(const KvArena& a, int64_t num_kv_heads, int64_t block_size, int64_t head_dim) {
  OPTIMATE_SHAPE_CHECK(a.k && a.v, "null KV arena");
  OPTIMATE_SHAPE_CHECK(a.quantized ? a.slot_bytes > 0 && a.slot_bytes % 16 == 0
                                   : a.slot_bytes == kv_bf16_block_bytes(num_kv_heads, block_size, head_dim),
                       "slot of {} bytes for {} KV heads x {} tokens x head dim {} ({})", a.slot_bytes,
                       num_kv_heads, block_size, head_dim, a.quantized ? "quantized" : "bf16 only");
}

}  // namespace optimate::cuda
