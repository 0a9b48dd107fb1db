// Attention of single query rows over the paged KV cache: the decode kernels (split-K
// "flash-decoding", GQA heads packed), also correct, though slow, for prefill rows.
//
// Three kernels compute the same thing. The tensor-core kernel runs the G = num_heads /
// num_kv_heads query heads of a KV group as the rows of one mma tile, so a key costs a few
// instructions and the kernel is bound by the KV bytes; it needs a block size that is a multiple
// of 16 and G <= 8. The head-cluster kernel (paged_attention_heads.h) runs the same warps as
// one cluster of blocks per (row, kv head), combining in shared memory rather than through
// global partials: for a few rows, where the split kernels wait on round trips, not bytes; same
// shapes. The CUDA-core kernel serves every shape and is kept as the baseline.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/kv_block.h"

namespace optimate::cuda {

enum class DecodeAttentionKernel {
  kAuto,          // head clusters for a few rows, tensor cores for more, where supported and
                  // G >= 2; else CUDA cores
  kCudaCores,
  kTensorCores,   // fails for shapes the kernel does not support
  kHeadClusters,  // the same shapes as kTensorCores; splits, workspace and counters unused;
                  // the Hopper path only (kernel_paths.h), refused on the portable one
};

struct PagedAttentionParams {
  const __nv_bfloat16* q = nullptr;  // token row t's heads at q + t * q_row_stride, [num_heads, head_dim]
  int64_t q_row_stride = 0;
  KvArena cache;  // one layer's K and V blocks (kv_block.h); read only
  const int32_t* rows = nullptr;     // [num_rows] token row of each attention row; null = r itself
  const int32_t* row_seq = nullptr;  // [num_rows] row of block_tables the row reads
  const int32_t* row_ctx = nullptr;  // [num_rows] keys attended: positions [0, ctx); 0 = padding
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq] entries (code << 28 | slot)
  int64_t max_blocks_per_seq = 0;
  __nv_bfloat16* out = nullptr;  // token row t's heads at out + t * out_row_stride
  int64_t out_row_stride = 0;
  float* workspace = nullptr;  // paged_attention_workspace_floats(...) floats when num_splits > 1
  // [num_rows, num_kv_heads] zeros, or null: with splits, the last block of each (row, kv head)
  // then combines them in the same launch and leaves its counter zero again. With counters the
  // tensor-core kernel also uses fewer splits than num_splits for rows with few keys (at least
  // 32 keys per split); the workspace stride stays num_splits.
  int* split_counters = nullptr;
  int64_t num_rows = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // 64 or 128
  int64_t block_size = 0;
  int num_splits = 1;  // each row's keys are cut into this many equal parts, combined after
  float scale = 1.0f;  // softmax scale, 1/sqrt(head_dim)
  DecodeAttentionKernel kernel = DecodeAttentionKernel::kAuto;
  // Every row's keys but its last were written by earlier launches (true when the rows are
  // decode tokens, one new key each): the tensor-core kernel then starts loading them before
  // the kernel ahead of it on the stream has finished (programmatic launch).
  bool prior_keys_stable = false;
};

void paged_attention(const PagedAttentionParams& p, cudaStream_t stream);

// The splits the tensor-core kernel gives a row of `ctx` keys when it combines them in the
// launch (split_counters set): at most one per 32 keys, so a graph captured with splits for the
// longest context serves short rows without tiny splits.
__host__ __device__ inline int paged_attention_tc_row_splits(int num_splits, int ctx) {
  const int most = (ctx + 31) / 32;
  return most < 1 ? 1 : (most < num_splits ? most : num_splits);
}

int64_t paged_attention_workspace_floats(int64_t num_rows, int64_t num_heads, int num_splits,
                                         int64_t head_dim);

// The kernel kAuto stands for with these shapes when the rows are many (kAuto is never
// returned); the split choice below goes by it.
DecodeAttentionKernel resolve_decode_kernel(DecodeAttentionKernel requested, int64_t num_heads,
                                            int64_t num_kv_heads, int64_t block_size);

// The kernel a launch of `num_rows` rows runs: resolve_decode_kernel's, except that kAuto takes
// the head clusters in place of the tensor-core kernel when the GPU runs them (`head_clusters`:
// KernelPaths, kernel_paths.h) and num_rows * num_kv_heads is at most half the SMs
// (paged_attention_head_cluster_size).
DecodeAttentionKernel resolve_decode_kernel_for_rows(DecodeAttentionKernel requested, int64_t num_rows,
                                                     int64_t num_heads, int64_t num_kv_heads,
                                                     int64_t block_size, int num_sms, bool head_clusters);

// The GQA shape and cache block size that pick the kernel (see resolve_decode_kernel).
struct DecodeAttentionShape {
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 0;
  DecodeAttentionKernel kernel = DecodeAttentionKernel::kAuto;
  bool quantized_kv = false;  // the cache may hold quantized blocks (KvArena::quantized)
};

// Splits that fill the GPU: enough (row, kv head, split) blocks for the resolved kernel to
// cover the SMs (CUDA cores: about two waves of 4-warp blocks; tensor cores: one wave of
// 1-warp blocks, four over a cache that may hold quantized blocks), at least 32 keys per
// split, at most 64 splits.
int paged_attention_num_splits(int64_t num_rows, const DecodeAttentionShape& s, int64_t max_ctx,
                               int num_sms);

// Rows past which paged_attention_num_splits is always 1, and the workspace floats that any
// number of rows up to that bound needs.
int64_t paged_attention_split_rows(const DecodeAttentionShape& s, int num_sms);
int64_t paged_attention_split_workspace_floats(const DecodeAttentionShape& s, int num_sms);

}  // namespace optimate::cuda
