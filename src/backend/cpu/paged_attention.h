// The CPU runner's KV cache operations over byte arenas (kv/kv_format.h, kv/kv_layout.h):
// writing new tokens' K/V at each block's precision, causal paged attention that reads every
// precision (dequantizing a block's rows as it goes), and in-place requantization. These are
// the CPU twins of the CUDA kernels' cache handling.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "backend/cpu/cpu_thread_pool.h"

#include "kv/kv_format.h"
#include "kv/kv_layout.h"

namespace optimate::cpu {

struct AttentionDims {
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 0;
  int64_t num_blocks = 0;  // slots per arena
};

// One layer's cache: K and V arenas of slots, and the K and V format of each precision code
// the layout holds (kv/kv_layout.h).
struct KvArenas {
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;
  int64_t slot_bytes = 0;
  kv::KvBlockFormats formats;

  static kv::KvBlockFormats formats_for(const kv::KvLayout& layout, const AttentionDims& dims) {
    return {layout, dims.num_kv_heads, dims.block_size, dims.head_dim};
  }
  const kv::BlockLayout& k_format(int32_t entry) const { return formats.key(entry); }
  const kv::BlockLayout& v_format(int32_t entry) const { return formats.value(entry); }
  uint8_t* k_block(int32_t entry) const { return k + kv::entry_slot(entry) * slot_bytes; }
  uint8_t* v_block(int32_t entry) const { return v + kv::entry_slot(entry) * slot_bytes; }
};

// One sequence's queries in a paged-attention call: rows [first_row, first_row + num_tokens) of
// q/out are its tokens at positions start_pos, start_pos + 1, ...; each attends causally to the
// cache positions [0, its own position].
struct AttentionSeq {
  int64_t first_row = 0;
  int64_t num_tokens = 0;
  int64_t start_pos = 0;
  std::span<const int32_t> block_table;  // entries (kv/kv_format.h)
};

// Writes k/v rows ([num_tokens, num_kv_heads * head_dim], row stride `row_stride`) of the
// sequences' tokens into the layer's cache at their positions, each block at its precision
// (Error(kInternal) for a block written whole only: int4 keys scaled per channel).
void write_kv(const float* k, const float* v, int64_t row_stride, const KvArenas& cache,
              std::span<const AttentionSeq> seqs, const AttentionDims& dims);

// Per-thread scores and dequantized rows, reused across calls so a step does not allocate.
struct AttentionScratch {
  std::vector<std::vector<float>> scores;  // [thread][heads per kv head * context]
  std::vector<std::vector<float>> rows;    // [thread][block_size * head_dim]
};

// out[row, h] = softmax(q[row, h] . K^T * scale) V over the row's causal context, with GQA
// (head h reads kv head h / (num_heads / num_kv_heads)). q row stride `q_stride` floats; out is
// dense [rows, num_heads * head_dim]. Parallel over (token, kv head) on the pool.
void paged_attention(const float* q, int64_t q_stride, const KvArenas& cache, float* out,
                     std::span<const AttentionSeq> seqs, const AttentionDims& dims, float scale,
                     CpuThreadPool& pool, AttentionScratch& scratch);

// Rewrites the block of `from_entry` (full precision) at `to_entry`'s precision into
// `to_entry`'s slot (the same slot, or another one), K and V. `rows` is scratch.
void requantize_block(const KvArenas& cache, int32_t from_entry, int32_t to_entry,
                      const AttentionDims& dims, std::vector<float>& rows);

}  // namespace optimate::cpu
