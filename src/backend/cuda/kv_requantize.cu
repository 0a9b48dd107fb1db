// Requantization of bf16 KV blocks, in place or into a free slot of another page (see the header). A unit is one block's K or V of
// one layer; units are numbered (op, layer, K/V). Per batch of units that fits the scratch:
//   quantize: grid (units, rows / 4), 128 threads, a warp per head row: the row's bf16 values
//             from the arena, quantized as kv::store_row (kv_quant.cuh) into the unit's
//             scratch block;
//   copy back: grid (units), 256 threads, the quantized block's bytes over the block's start.
#include "backend/cuda/kv_requantize.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kv_quant.cuh"

namespace optimate::cuda {
namespace {

constexpr int kWarps = 4;

// Scratch per unit: the largest quantized block (8-bit codes and a float scale per row).
int64_t unit_stride(const KvRequantizeShape& s) {
  return (s.num_kv_heads * s.block_size * (s.head_dim + 4) + 15) / 16 * 16;
}

struct Unit {
  int32_t to_entry;
  const uint8_t* src;  // the bf16 block's first byte in its arena
  uint8_t* dst;        // where the quantized block goes (the same slot, or another page's)
};

__device__ __forceinline__ Unit unit_at(const KvRequantizeShape& s, const int32_t* ops, int64_t u) {
  const int64_t op = u / (2 * s.num_layers), rest = u % (2 * s.num_layers);
  const int32_t from = ops[2 * op], to = ops[2 * op + 1];
  uint8_t* arena = s.arenas + rest * s.num_slots * s.slot_bytes;  // rest = 2 layer + (0 K, 1 V)
  return {to, arena + static_cast<int64_t>(kv_entry_slot(from)) * s.slot_bytes,
          arena + static_cast<int64_t>(kv_entry_slot(to)) * s.slot_bytes};
}

template <int E>
__global__ void __launch_bounds__(kWarps * 32)
    requantize_kernel(const KvRequantizeShape s, const int32_t* __restrict__ ops, int64_t first_unit,
                      uint8_t* __restrict__ scratch, int64_t stride) {
  constexpr int D = 32 * E;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bs = static_cast<int>(s.block_size), kvh = static_cast<int>(s.num_kv_heads);
  const int r = blockIdx.y * kWarps + warp;
  if (r >= kvh * bs) return;
  const int head = r / bs, token = r % bs;
  const Unit unit = unit_at(s, ops, first_unit + blockIdx.x);
  const auto* src = reinterpret_cast<const __nv_bfloat16*>(unit.src + kv_codes_offset(kKvBf16, bs, D, head, token));
  float x[E];
#pragma unroll
  for (int i = 0; i < E; ++i) x[i] = __bfloat162float(src[E * lane + i]);
  kv_store_block_row_warp<E>(kv_entry_code(unit.to_entry), x, scratch + blockIdx.x * stride, kvh, bs, head,
                             token, lane);
}

__global__ void __launch_bounds__(256)
    copy_back_kernel(const KvRequantizeShape s, const int32_t* __restrict__ ops, int64_t first_unit,
                     const uint8_t* __restrict__ scratch, int64_t stride) {
  const Unit unit = unit_at(s, ops, first_unit + blockIdx.x);
  const int code = kv_entry_code(unit.to_entry), D = static_cast<int>(s.head_dim);
  const int64_t bytes = s.num_kv_heads * s.block_size * (kv_row_bytes(code, D) + kv_scale_bytes(code, D));
  const auto* src = reinterpret_cast<const uint32_t*>(scratch + blockIdx.x * stride);
  auto* dst = reinterpret_cast<uint32_t*>(unit.dst);
  for (int64_t i = threadIdx.x; i < bytes / 4; i += blockDim.x) dst[i] = src[i];
}

}  // namespace

int64_t kv_requantize_scratch_bytes(const KvRequantizeShape& shape, int64_t num_ops) {
  return num_ops * 2 * shape.num_layers * unit_stride(shape);
}

void kv_requantize(const KvRequantizeShape& s, const int32_t* ops, int64_t num_ops, uint8_t* scratch,
                   int64_t scratch_bytes, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(s.head_dim == 64 || s.head_dim == 128, "head_dim {} (64 or 128)", s.head_dim);
  OPTIMATE_SHAPE_CHECK(s.arenas && s.num_layers > 0 && s.num_kv_heads > 0 && s.block_size > 0 &&
                           s.slot_bytes % 16 == 0 && s.num_slots > 0,
                       "arena of {} slots of {} bytes, {} layers, {} kv heads, block {}", s.num_slots,
                       s.slot_bytes, s.num_layers, s.num_kv_heads, s.block_size);
  const int64_t stride = unit_stride(s);
  const int64_t per_batch = scratch_bytes / stride;
  OPTIMATE_SHAPE_CHECK(per_batch >= 1, "requantize scratch of {} bytes holds no block ({} bytes)",
                       scratch_bytes, stride);
  const int64_t units = num_ops * 2 * s.num_layers;
  const unsigned row_blocks = static_cast<unsigned>((s.num_kv_heads * s.block_size + kWarps - 1) / kWarps);
  for (int64_t first = 0; first < units; first += per_batch) {
    const unsigned n = static_cast<unsigned>(std::min(per_batch, units - first));
    if (s.head_dim == 64)
      requantize_kernel<2><<<dim3(n, row_blocks), kWarps * 32, 0, stream>>>(s, ops, first, scratch, stride);
    else
      requantize_kernel<4><<<dim3(n, row_blocks), kWarps * 32, 0, stream>>>(s, ops, first, scratch, stride);
    OPTIMATE_CUDA_CHECK_LAUNCH("requantize_kernel");
    copy_back_kernel<<<n, 256, 0, stream>>>(s, ops, first, scratch, stride);
    OPTIMATE_CUDA_CHECK_LAUNCH("copy_back_kernel");
  }
}

}  // namespace optimate::cuda
