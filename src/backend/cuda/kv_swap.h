// Copies KV blocks between the device arenas and the host tier (kv/kv_copy.h) on the GPU: the
// host arenas are pinned and mapped, so one kernel reads and writes them over the host link
// directly, every copy of a batch and every layer's K and V in one launch, instead of one DMA
// call per block and layer (64 per block of a 32-layer model).
//
//   device: [num_layers, 2 (K, V), device_slots, slot_bytes]
//   host:   [num_layers, 2 (K, V), host_slots, slot_bytes] (pinned, mapped: a device address)
//   ops:    [num_ops] KvSwapOp on the device; within one launch no op may read what another
//           writes (kv::copy_batches splits a step's list so)
// Launch: num_ctas blocks of 256 threads stride over the (op, layer, K/V) units; each unit's
// bytes go 16 at a time, 4 loads in flight per thread. A few CTAs saturate the host link, and
// the rest of the GPU keeps computing the step the copies overlap.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace optimate::cuda {

struct KvSwapShape {
  uint8_t* device = nullptr;
  uint8_t* host = nullptr;
  int64_t device_slots = 0;
  int64_t host_slots = 0;
  int64_t slot_bytes = 0;  // a multiple of 16
  int64_t num_layers = 0;
};

struct KvSwapOp {
  int32_t device_slot = 0;
  int32_t host_slot = 0;
  int32_t num_slots = 0;
  int32_t to_host = 0;  // 1: device -> host, 0: host -> device
};

// CTAs a swap launch takes by default: enough to keep the host link busy.
inline constexpr int kKvSwapCtas = 32;

void kv_swap_copy(const KvSwapShape& shape, const KvSwapOp* ops, int64_t num_ops, int num_ctas, cudaStream_t stream);

}  // namespace optimate::cuda
