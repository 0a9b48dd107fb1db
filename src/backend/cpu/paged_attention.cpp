#include "backend/cpu/paged_attention.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include <omp.h>

#include "core/error.h"

namespace optimate::cpu {
namespace {

inline float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

inline void axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// Index of the sequence that owns `row` (seqs are in row order).
inline size_t seq_of_row(std::span<const AttentionSeq> seqs, int64_t row) {
  auto it = std::upper_bound(seqs.begin(), seqs.end(), row,
                             [](int64_t r, const AttentionSeq& s) { return r < s.first_row; });
  return static_cast<size_t>(it - seqs.begin()) - 1;
}

// The first `n` rows of kv head `head` in a block, as floats: f32 blocks are read in place,
// other precisions are dequantized into `buf` (n * head_dim floats).
const float* block_rows(const kv::BlockLayout& f, const uint8_t* block, int64_t head, int64_t n, float* buf) {
  if (f.precision == kv::KvPrecision::kF32)
    return reinterpret_cast<const float*>(block + f.row_offset(head, 0));
  if (f.precision == kv::KvPrecision::kBF16) {
    // A head's rows are contiguous: one widening loop over all of them (vectorized), the
    // default cache's hot path, where a call per row would cost as much as the dot products.
    const uint8_t* src = block + f.row_offset(head, 0);
    for (int64_t i = 0; i < n * f.head_dim; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      buf[i] = std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
    }
    return buf;
  }
  for (int64_t t = 0; t < n; ++t) kv::load_row(f, block, head, t, buf + t * f.head_dim);
  return buf;
}

}  // namespace

void write_kv(const float* k, const float* v, int64_t row_stride, const KvArenas& cache,
              std::span<const AttentionSeq> seqs, const AttentionDims& dims) {
  const int64_t hd = dims.head_dim;
  for (const AttentionSeq& seq : seqs) {
    for (int64_t i = 0; i < seq.num_tokens; ++i) {
      const int64_t pos = seq.start_pos + i;
      const int32_t entry = seq.block_table[pos / dims.block_size];
      const kv::BlockLayout& kf = cache.k_format(entry);
      const kv::BlockLayout& vf = cache.v_format(entry);
      const int64_t slot = pos % dims.block_size;
      const float* kr = k + (seq.first_row + i) * row_stride;
      const float* vr = v + (seq.first_row + i) * row_stride;
      for (int64_t h = 0; h < dims.num_kv_heads; ++h) {
        kv::store_row(kf, cache.k_block(entry), h, slot, kr + h * hd);
        kv::store_row(vf, cache.v_block(entry), h, slot, vr + h * hd);
      }
    }
  }
}

void paged_attention(const float* q, int64_t q_stride, const KvArenas& cache, float* out,
                     std::span<const AttentionSeq> seqs, const AttentionDims& dims, float scale,
                     CpuThreadPool& pool, AttentionScratch& scratch) {
  if (seqs.empty()) return;
  const int64_t hd = dims.head_dim;
  const int64_t bs = dims.block_size;
  const int64_t nkv = dims.num_kv_heads;
  const int64_t group = dims.num_heads / nkv;
  int64_t max_ctx = 0;
  for (const AttentionSeq& s : seqs) max_ctx = std::max(max_ctx, s.start_pos + s.num_tokens);
  const int64_t num_rows = seqs.back().first_row + seqs.back().num_tokens;
  const int64_t num_items = num_rows * nkv;
  // Multiply-adds of the step (QK and PV): small decodes stay on the calling thread.
  int64_t work = 0;
  for (const AttentionSeq& s : seqs) work += s.num_tokens * (s.start_pos + (s.num_tokens + 1) / 2);
  work *= 2 * dims.num_heads * hd;
  const bool parallel = work >= (int64_t{1} << 18);
  const int threads = parallel ? pool.num_threads() : 1;
  if (static_cast<int>(scratch.scores.size()) < threads) scratch.scores.resize(threads);
  if (static_cast<int>(scratch.rows.size()) < threads) scratch.rows.resize(threads);
  for (int i = 0; i < threads; ++i) {
    if (static_cast<int64_t>(scratch.scores[i].size()) < group * max_ctx) scratch.scores[i].resize(group * max_ctx);
    if (static_cast<int64_t>(scratch.rows[i].size()) < bs * hd) scratch.rows[i].resize(bs * hd);
  }

  const auto item_fn = [&](int64_t item, int thread) {
    const int64_t row = item / nkv;
    const int64_t kvh = item % nkv;
    const AttentionSeq& seq = seqs[seq_of_row(seqs, row)];
    const int64_t ctx = seq.start_pos + (row - seq.first_row) + 1;
    float* scores = scratch.scores[thread].data();  // [group, ctx]
    float* rows = scratch.rows[thread].data();      // [bs, hd] dequantized rows
    const float* qg = q + row * q_stride + kvh * group * hd;
    float* og = out + row * dims.num_heads * hd + kvh * group * hd;

    for (int64_t j0 = 0; j0 < ctx; j0 += bs) {
      const int32_t entry = seq.block_table[j0 / bs];
      const int64_t n = std::min(bs, ctx - j0);
      const float* kb = block_rows(cache.k_format(entry), cache.k_block(entry), kvh, n, rows);
      for (int64_t s = 0; s < n; ++s)
        for (int64_t g = 0; g < group; ++g)
          scores[g * ctx + j0 + s] = dot(qg + g * hd, kb + s * hd, hd) * scale;
    }
    for (int64_t g = 0; g < group; ++g) {
      float* sg = scores + g * ctx;
      float m = sg[0];
      for (int64_t j = 1; j < ctx; ++j) m = std::max(m, sg[j]);
      float sum = 0.0f;
      for (int64_t j = 0; j < ctx; ++j) {
        sg[j] = std::exp(sg[j] - m);
        sum += sg[j];
      }
      const float inv = 1.0f / sum;
      for (int64_t j = 0; j < ctx; ++j) sg[j] *= inv;
      std::fill_n(og + g * hd, hd, 0.0f);
    }
    for (int64_t j0 = 0; j0 < ctx; j0 += bs) {
      const int32_t entry = seq.block_table[j0 / bs];
      const int64_t n = std::min(bs, ctx - j0);
      const float* vb = block_rows(cache.v_format(entry), cache.v_block(entry), kvh, n, rows);
      for (int64_t s = 0; s < n; ++s)
        for (int64_t g = 0; g < group; ++g) axpy(scores[g * ctx + j0 + s], vb + s * hd, og + g * hd, hd);
    }
  };
  if (parallel) {
    pool.run(num_items, item_fn);
  } else {
    for (int64_t item = 0; item < num_items; ++item) item_fn(item, 0);
  }
}

void requantize_block(const KvArenas& cache, int32_t from_entry, int32_t to_entry,
                      const AttentionDims& dims, std::vector<float>& rows) {
  const int64_t hd = dims.head_dim, bs = dims.block_size, nkv = dims.num_kv_heads;
  rows.resize(static_cast<size_t>(nkv * bs * hd));
  for (const bool keys : {true, false}) {
    const kv::BlockLayout& from = keys ? cache.k_format(from_entry) : cache.v_format(from_entry);
    const kv::BlockLayout& to = keys ? cache.k_format(to_entry) : cache.v_format(to_entry);
    // Read the whole block before writing: in place, the new bytes overlap the old ones.
    const uint8_t* src = keys ? cache.k_block(from_entry) : cache.v_block(from_entry);
    for (int64_t h = 0; h < nkv; ++h)
      for (int64_t t = 0; t < bs; ++t) kv::load_row(from, src, h, t, rows.data() + (h * bs + t) * hd);
    kv::store_block(to, keys ? cache.k_block(to_entry) : cache.v_block(to_entry), rows.data());
  }
}

}  // namespace optimate::cpu
