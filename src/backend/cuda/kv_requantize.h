// Requantizes full-precision (bf16) KV blocks: each becomes an fp8, int8 or int4 block
// (kv/kv_format.h) at its own first slot or at a free slot of another page (kv/block_pool.h),
// for every layer's K and V. In place the quantized block is smaller and starts at the same
// byte, so every block is read whole before any of it is written: a first kernel quantizes the
// blocks of a batch into scratch memory, a second copies them to their slots.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace optimate::cuda {

struct KvRequantizeShape {
  uint8_t* arenas = nullptr;  // [num_layers, 2 (K, V), num_slots * slot_bytes]
  int64_t num_slots = 0;
  int64_t slot_bytes = 0;
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t block_size = 0;
  int64_t head_dim = 0;  // 64 or 128
};

// ops: [num_ops, 2] int32 on the device, (from_entry, to_entry) pairs the caller has checked:
// from a bf16 entry (code 0) to a slot at code 1, 2 or 3 (the same one, or one no bf16 block of
// the batch covers). scratch: device bytes for one
// batch of blocks (at least kv_requantize_scratch_bytes(shape, 1)).
void kv_requantize(const KvRequantizeShape& shape, const int32_t* ops, int64_t num_ops, uint8_t* scratch,
                   int64_t scratch_bytes, cudaStream_t stream);

// Scratch bytes that hold the quantized K and V of every layer of `num_ops` blocks.
int64_t kv_requantize_scratch_bytes(const KvRequantizeShape& shape, int64_t num_ops);

}  // namespace optimate::cuda
