// RoPE + KV-cache write (rope_kv_write.h): each token's row of the QKV GEMM output is read once
// and written once, instead of a rotation pass over q and k followed by a pass that reads k and
// v again for the cache.
//
// Layout: qkv [num_tokens, row_stride] bf16 (q heads, k heads, v heads); the cache as
// kv_block.h lays it out. Launch: one block of 8 warps per token; a warp takes one head row
// at a time, lane l holding elements [E l, E l + E) (head_dim = 32 E), so lane l and lane l ^ 16
// hold the two halves of each rotated pair (one shuffle) and the quantized cache rows take
// kv_quant.cuh's warp-wide store unchanged. Each warp loads kBatch rows before it computes any,
// to keep loads in flight. The angles are the token's own: a lane computes the E sines and
// cosines of its pairs once (accurate sincosf, positions reach 1e5) for all its rows.
#include "backend/cuda/rope_kv_write.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kv_quant.cuh"
#include "backend/cuda/rope_pair.cuh"

namespace optimate::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBatch = 4;

template <int E>
__global__ void __launch_bounds__(kThreads, 4)
    rope_kv_write_kernel(__nv_bfloat16* __restrict__ qkv, int64_t row_stride, const int32_t* __restrict__ positions,
                         const float* __restrict__ inv_freq, KvArena cache, const int32_t* __restrict__ slot_mapping,
                         int num_heads, int num_kv_heads, int block_size) {
  constexpr int D = 32 * E;
  const int64_t t = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool second_half = lane >= 16;
  const float pos = static_cast<float>(positions[t]);
  float cos_a[E], sin_a[E];
#pragma unroll
  for (int j = 0; j < E; ++j) sincosf(pos * inv_freq[(lane % 16) * E + j], &sin_a[j], &cos_a[j]);
  const int32_t target = slot_mapping[t];
  int code = 0, token = 0;
  int64_t slot_offset = 0;  // bytes from an arena's start to the target's block
  if (target >= 0) {
    code = kv_target_code(target);
    const int32_t cache_row = kv_target_row(target);
    slot_offset = static_cast<int64_t>(cache_row / block_size) * cache.slot_bytes;
    token = cache_row % block_size;
  }
  __nv_bfloat16* row = qkv + t * row_stride;
  const int rotated = num_heads + num_kv_heads, rows = rotated + num_kv_heads;
  for (int r0 = warp; r0 < rows; r0 += kWarps * kBatch) {
    float x[kBatch][E];
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (r0 + u * kWarps < rows) kv_load_row_part<E>(row + (r0 + u * kWarps) * D, lane, x[u]);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int r = r0 + u * kWarps;
      if (r >= rows) break;
      if (r >= rotated) {  // a v head
        if (target >= 0)
          kv_store_block_row_warp<E>(code, x[u], cache.v + slot_offset, num_kv_heads, block_size, r - rotated, token,
                                     lane);
        continue;
      }
      float y[E];
#pragma unroll
      for (int j = 0; j < E; ++j) {
        const float other = __shfl_xor_sync(0xffffffffu, x[u][j], 16);
        const float2 turned = second_half ? rope_pair(other, x[u][j], cos_a[j], sin_a[j])
                                          : rope_pair(x[u][j], other, cos_a[j], sin_a[j]);
        y[j] = __bfloat162float(__float2bfloat16(second_half ? turned.y : turned.x));  // what rope_inplace stores
      }
      kv_store_row_warp<E>(kKvBf16, y, reinterpret_cast<uint8_t*>(row + r * D), nullptr, lane);
      if (r >= num_heads && target >= 0)
        kv_store_block_row_warp<E>(code, y, cache.k + slot_offset, num_kv_heads, block_size, r - num_heads, token,
                                   lane);
    }
  }
}

}  // namespace

bool rope_kv_write_fits(int64_t head_dim, int64_t row_stride) {
  return (head_dim == 64 || head_dim == 128) && row_stride % 4 == 0;
}

void rope_kv_write(__nv_bfloat16* qkv, int64_t row_stride, const int32_t* positions, const float* inv_freq,
                   const KvArena& cache, const int32_t* slot_mapping, int64_t num_tokens, int64_t num_heads,
                   int64_t num_kv_heads, int64_t block_size, int64_t head_dim, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(rope_kv_write_fits(head_dim, row_stride),
                       "RoPE + KV write: head_dim {} (64 or 128), row stride {} (a multiple of 4)", head_dim,
                       row_stride);
  OPTIMATE_SHAPE_CHECK(num_heads > 0 && num_kv_heads > 0 && row_stride >= (num_heads + 2 * num_kv_heads) * head_dim,
                       "row stride {} < (heads {} + 2 x kv heads {}) x head_dim {}", row_stride, num_heads,
                       num_kv_heads, head_dim);
  OPTIMATE_SHAPE_CHECK(block_size > 0 && num_tokens >= 0 && num_tokens < (int64_t{1} << 31), "block_size {} tokens {}",
                       block_size, num_tokens);
  check_kv_arena(cache, num_kv_heads, block_size, head_dim);
  if (num_tokens == 0) return;
  const auto launch = [&](auto kernel) {
    kernel<<<static_cast<unsigned>(num_tokens), kThreads, 0, stream>>>(
        qkv, row_stride, positions, inv_freq, cache, slot_mapping, static_cast<int>(num_heads),
        static_cast<int>(num_kv_heads), static_cast<int>(block_size));
  };
  if (head_dim == 64) launch(rope_kv_write_kernel<2>);
  else launch(rope_kv_write_kernel<4>);
  OPTIMATE_CUDA_CHECK_LAUNCH("rope_kv_write_kernel");
}

}  // namespace optimate::cuda
