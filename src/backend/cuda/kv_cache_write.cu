// Paged KV-cache write: scatters the rotated keys and the values of each new token to its
// block row. Blocks are [num_kv_heads, block_size] rows (kv_block.h), so one head's tokens of
// a block are contiguous for the attention kernels' 16-byte loads.
//
// A cache of bf16 blocks only takes the plain kernel: one block per token, threads striding
// over num_kv_heads * head_dim elements. A cache that may hold quantized blocks takes the
// quantizing kernel: one block per token (its target's precision is block-uniform), a warp per
// head row of K or V, lane l holding elements [E l, E l + E) so the row's scales come from warp
// reductions (kv_quant.cuh, the CPU twin's arithmetic).
// Launch: num_tokens blocks of 128 threads.
#include "backend/cuda/kv_cache_write.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kv_quant.cuh"

namespace optimate::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void kv_cache_write_kernel(const __nv_bfloat16* __restrict__ k_src,
                                      const __nv_bfloat16* __restrict__ v_src,
                                      int64_t src_row_stride, __nv_bfloat16* __restrict__ k_cache,
                                      __nv_bfloat16* __restrict__ v_cache,
                                      const int32_t* __restrict__ slot_mapping, int num_kv_heads,
                                      int block_size, int head_dim) {
  const int t = blockIdx.x;
  const int slot = slot_mapping[t];
  if (slot < 0) return;
  const int64_t block = slot / block_size;
  const int offset = slot % block_size;
  const int n = num_kv_heads * head_dim;
  for (int idx = threadIdx.x; idx < n; idx += kThreads) {
    const int head = idx / head_dim;
    const int d = idx % head_dim;
    const int64_t dst = ((block * num_kv_heads + head) * block_size + offset) * head_dim + d;
    k_cache[dst] = k_src[t * src_row_stride + idx];
    v_cache[dst] = v_src[t * src_row_stride + idx];
  }
}

template <int E>
__global__ void __launch_bounds__(kThreads)
    kv_cache_write_quant_kernel(const __nv_bfloat16* __restrict__ k_src, const __nv_bfloat16* __restrict__ v_src,
                                int64_t src_row_stride, KvArena cache, const int32_t* __restrict__ slot_mapping,
                                int num_kv_heads, int block_size) {
  constexpr int D = 32 * E;
  const int t = blockIdx.x;
  const int32_t target = slot_mapping[t];
  if (target < 0) return;
  const int code = kv_target_code(target);
  const int32_t row = kv_target_row(target);
  const int64_t slot = row / block_size;
  const int token = row % block_size;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < 2 * num_kv_heads; r += kThreads / 32) {
    const bool is_v = r >= num_kv_heads;
    const int head = is_v ? r - num_kv_heads : r;
    float x[E];
    kv_load_row_part<E>((is_v ? v_src : k_src) + t * src_row_stride + head * D, lane, x);
    uint8_t* block = (is_v ? cache.v : cache.k) + slot * cache.slot_bytes;
    kv_store_block_row_warp<E>(code, x, block, num_kv_heads, block_size, head, token, lane);
  }
}

}  // namespace

void kv_cache_write(const __nv_bfloat16* k_src, const __nv_bfloat16* v_src, int64_t src_row_stride,
                    const KvArena& cache, const int32_t* slot_mapping, int64_t num_tokens,
                    int64_t num_kv_heads, int64_t block_size, int64_t head_dim, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(src_row_stride >= num_kv_heads * head_dim,
                       "row stride {} < kv heads {} * head_dim {}", src_row_stride, num_kv_heads,
                       head_dim);
  OPTIMATE_SHAPE_CHECK(block_size > 0 && head_dim > 0, "block_size {} head_dim {}", block_size,
                       head_dim);
  check_kv_arena(cache, num_kv_heads, block_size, head_dim);
  if (num_tokens == 0) return;
  if (!cache.quantized) {
    kv_cache_write_kernel<<<num_tokens, kThreads, 0, stream>>>(
        k_src, v_src, src_row_stride, reinterpret_cast<__nv_bfloat16*>(cache.k),
        reinterpret_cast<__nv_bfloat16*>(cache.v), slot_mapping, static_cast<int>(num_kv_heads),
        static_cast<int>(block_size), static_cast<int>(head_dim));
    OPTIMATE_CUDA_CHECK_LAUNCH("kv_cache_write_kernel");
    return;
  }
  OPTIMATE_SHAPE_CHECK(head_dim == 64 || head_dim == 128, "quantized KV: head_dim {} (64 or 128)", head_dim);
  OPTIMATE_SHAPE_CHECK(src_row_stride % 4 == 0, "row stride {} must keep 8-byte alignment", src_row_stride);
  if (head_dim == 64)
    kv_cache_write_quant_kernel<2><<<num_tokens, kThreads, 0, stream>>>(
        k_src, v_src, src_row_stride, cache, slot_mapping, static_cast<int>(num_kv_heads),
        static_cast<int>(block_size));
  else
    kv_cache_write_quant_kernel<4><<<num_tokens, kThreads, 0, stream>>>(
        k_src, v_src, src_row_stride, cache, slot_mapping, static_cast<int>(num_kv_heads),
        static_cast<int>(block_size));
  OPTIMATE_CUDA_CHECK_LAUNCH("kv_cache_write_quant_kernel");
}

}  // namespace optimate::cuda
