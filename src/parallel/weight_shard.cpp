#include "parallel/weight_shard.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include <fmt/ranges.h>

#include "core/error.h"

namespace optimate::parallel {
namespace {

std::string part_name(const HostTensor& t, const char* what, int64_t begin, int64_t count) {
  return fmt::format("{}[{} {}..{}]", t.name, what, begin, begin + count);
}

bool block_aligned(DType dtype, int64_t begin, int64_t count) {
  const auto block = static_cast<int64_t>(dtype_block_elems(dtype));
  return begin % block == 0 && count % block == 0;
}

HostTensor owned(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  auto buffer = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  HostTensor out;
  out.name = std::move(name);
  out.dtype = dtype;
  out.shape = std::move(shape);
  out.data = {buffer->data(), buffer->size()};
  out.owner = std::move(buffer);
  return out;
}

// A tensor whose bytes disagree with its shape would be read past its end.
void check_bytes(const HostTensor& t) {
  if (t.data.size() != dtype_row_bytes(t.dtype, static_cast<size_t>(t.num_elems())))
    fail(ErrorCode::kInvalidFile, "tensor '{}' holds {} bytes, expected {} for shape [{}]", t.name, t.data.size(),
         dtype_row_bytes(t.dtype, static_cast<size_t>(t.num_elems())), fmt::join(t.shape, ", "));
}

}  // namespace

HostTensor slice_rows(const HostTensor& t, int64_t row0, int64_t rows) {
  const bool vector = t.shape.size() == 1;
  if (t.shape.empty() || t.shape.size() > 2 || row0 < 0 || rows < 0 || row0 + rows > t.dim(0))
    fail(ErrorCode::kInvalidFile, "cannot take rows [{}, {}) of tensor '{}' of shape [{}]", row0, row0 + rows,
         t.name, fmt::join(t.shape, ", "));
  check_bytes(t);
  const int64_t cols = vector ? 1 : t.dim(1);
  if (vector && !block_aligned(t.dtype, row0, rows)) {  // a quantized vector cut inside a block
    const std::vector<float> all = to_f32(t);
    return make_f32_tensor(part_name(t, "rows", row0, rows), {rows},
                           std::vector<float>(all.begin() + row0, all.begin() + row0 + rows));
  }
  const size_t row_bytes = vector ? 0 : dtype_row_bytes(t.dtype, static_cast<size_t>(cols));
  HostTensor out = t;
  out.name = part_name(t, "rows", row0, rows);
  out.shape[0] = rows;
  out.data = vector ? t.data.subspan(dtype_row_bytes(t.dtype, row0), dtype_row_bytes(t.dtype, rows))
                    : t.data.subspan(row0 * row_bytes, rows * row_bytes);
  return out;
}

HostTensor slice_cols(const HostTensor& t, int64_t col0, int64_t cols) {
  if (t.shape.size() != 2 || col0 < 0 || cols < 0 || col0 + cols > t.dim(1))
    fail(ErrorCode::kInvalidFile, "cannot take columns [{}, {}) of tensor '{}' of shape [{}]", col0, col0 + cols,
         t.name, fmt::join(t.shape, ", "));
  check_bytes(t);
  const int64_t rows = t.dim(0), all_cols = t.dim(1);
  std::string name = part_name(t, "columns", col0, cols);
  if (block_aligned(t.dtype, col0, cols)) {
    const size_t row_bytes = dtype_row_bytes(t.dtype, all_cols), skip = dtype_row_bytes(t.dtype, col0),
                 keep = dtype_row_bytes(t.dtype, cols);
    std::vector<uint8_t> bytes(rows * keep);
    for (int64_t r = 0; r < rows; ++r) std::memcpy(bytes.data() + r * keep, t.data.data() + r * row_bytes + skip, keep);
    return owned(std::move(name), t.dtype, {rows, cols}, std::move(bytes));
  }
  std::vector<float> row(all_cols), values(rows * cols);
  const size_t row_bytes = dtype_row_bytes(t.dtype, all_cols);
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(t.dtype, t.data.data() + r * row_bytes, row.data(), all_cols);
    std::copy_n(row.begin() + col0, cols, values.begin() + r * cols);
  }
  return make_f32_tensor(std::move(name), {rows, cols}, std::move(values));
}

ModelWeights shard_weights(const ModelConfig& c, const ModelWeights& w, const TpPartition& p, int rank) {
  if (rank < 0 || rank >= p.num_ranks)
    fail(ErrorCode::kInternal, "shard_weights: rank {} of {}", rank, p.num_ranks);
  const int64_t hd = c.head_dim;
  const int64_t q_rows = p.heads_per_rank * hd, kv_rows = p.kv_heads_per_rank * hd;
  const int64_t inter = p.intermediate_per_rank;
  const int64_t v0 = p.vocab_begin(rank), vocab_rows = p.vocab_end(rank) - v0;

  ModelWeights out;
  out.tok_embeddings = slice_rows(w.tok_embeddings, v0, vocab_rows);
  out.final_norm = w.final_norm;
  const bool tied = w.lm_head.empty() || w.lm_head.data.data() == w.tok_embeddings.data.data();
  out.lm_head = tied ? out.tok_embeddings : slice_rows(w.lm_head, v0, vocab_rows);
  for (const LayerWeights& l : w.layers) {
    LayerWeights s;
    s.attn_norm = l.attn_norm;
    s.wq = slice_rows(l.wq, rank * q_rows, q_rows);
    s.wk = slice_rows(l.wk, rank * kv_rows, kv_rows);
    s.wv = slice_rows(l.wv, rank * kv_rows, kv_rows);
    s.wo = slice_cols(l.wo, rank * q_rows, q_rows);
    if (l.bq) s.bq = slice_rows(*l.bq, rank * q_rows, q_rows);
    if (l.bk) s.bk = slice_rows(*l.bk, rank * kv_rows, kv_rows);
    if (l.bv) s.bv = slice_rows(*l.bv, rank * kv_rows, kv_rows);
    s.q_norm = l.q_norm;  // per head, the same for every head
    s.k_norm = l.k_norm;
    s.ffn_norm = l.ffn_norm;
    if (c.is_moe()) {
      s.router = l.router;
      for (const ExpertWeights& e : l.experts)
        s.experts.push_back({slice_rows(e.w_gate, rank * inter, inter), slice_rows(e.w_up, rank * inter, inter),
                             slice_cols(e.w_down, rank * inter, inter)});
      out.layers.push_back(std::move(s));
      continue;
    }
    s.w_gate = slice_rows(l.w_gate, rank * inter, inter);
    s.w_up = slice_rows(l.w_up, rank * inter, inter);
    s.w_down = slice_cols(l.w_down, rank * inter, inter);
    out.layers.push_back(std::move(s));
  }
  return out;
}

}  // namespace optimate::parallel
