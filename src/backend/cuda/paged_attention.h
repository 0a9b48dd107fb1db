// Attention of single query rows over the paged KV cache: the decode kernel (split-K
// "flash-decoding", GQA heads packed), also correct, though slow, for prefill rows.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace optimate::cuda {

struct PagedAttentionParams {
  const __nv_bfloat16* q = nullptr;  // token row t's heads at q + t * q_row_stride, [num_heads, head_dim]
  int64_t q_row_stride = 0;
  const __nv_bfloat16* k_cache = nullptr;  // [num_blocks, num_kv_heads, block_size, head_dim]
  const __nv_bfloat16* v_cache = nullptr;  // same
  const int32_t* rows = nullptr;     // [num_rows] token row of each attention row; null = r itself
  const int32_t* row_seq = nullptr;  // [num_rows] row of block_tables the row reads
  const int32_t* row_ctx = nullptr;  // [num_rows] keys attended: positions [0, ctx); 0 = padding
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  int64_t max_blocks_per_seq = 0;
  __nv_bfloat16* out = nullptr;  // token row t's heads at out + t * out_row_stride
  int64_t out_row_stride = 0;
  float* workspace = nullptr;  // paged_attention_workspace_floats(...) floats when num_splits > 1
  // [num_rows, num_kv_heads] zeros, or null: with splits, the last block of each (row, kv head)
  // then combines them in the same launch and leaves its counter zero again.
  int* split_counters = nullptr;
  int64_t num_rows = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // 64 or 128
  int64_t block_size = 0;
  int num_splits = 1;  // each row's keys are cut into this many equal parts, combined after
  float scale = 1.0f;  // softmax scale, 1/sqrt(head_dim)
};

void paged_attention(const PagedAttentionParams& p, cudaStream_t stream);

int64_t paged_attention_workspace_floats(int64_t num_rows, int64_t num_heads, int num_splits,
                                         int64_t head_dim);

// Splits that fill the GPU: enough (row, kv head, split) blocks for about two waves, at least
// 32 keys per split, at most 64 splits.
int paged_attention_num_splits(int64_t num_rows, int64_t num_kv_heads, int64_t max_ctx,
                               int num_sms);

}  // namespace optimate::cuda
