// Paged KV-cache write: scatters the rotated keys and the values of each new token to its
// slot. Layout of the cache (shared with the CPU backend): [num_blocks, num_kv_heads,
// block_size, head_dim], so one head's tokens of a block are contiguous for the attention
// kernels' 16-byte loads.
// Launch: one block per token; threads stride over num_kv_heads * head_dim elements.
#include "backend/cuda/kv_cache_write.h"

#include "backend/cuda/cuda_check.h"

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

}  // namespace

void kv_cache_write(const __nv_bfloat16* k_src, const __nv_bfloat16* v_src,
                    int64_t src_row_stride, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                    const int32_t* slot_mapping, int64_t num_tokens, int64_t num_kv_heads,
                    int64_t block_size, int64_t head_dim, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(src_row_stride >= num_kv_heads * head_dim,
                       "row stride {} < kv heads {} * head_dim {}", src_row_stride, num_kv_heads,
                       head_dim);
  OPTIMATE_SHAPE_CHECK(block_size > 0 && head_dim > 0, "block_size {} head_dim {}", block_size,
                       head_dim);
  if (num_tokens == 0) return;
  kv_cache_write_kernel<<<num_tokens, kThreads, 0, stream>>>(
      k_src, v_src, src_row_stride, k_cache, v_cache, slot_mapping,
      static_cast<int>(num_kv_heads), static_cast<int>(block_size), static_cast<int>(head_dim));
  OPTIMATE_CUDA_CHECK_LAUNCH("kv_cache_write_kernel");
}

}  // namespace optimate::cuda
