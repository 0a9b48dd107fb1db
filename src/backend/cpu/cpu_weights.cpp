#include "backend/cpu/cpu_weights.h"

#include <algorithm>
#include <initializer_list>

#include <fmt/ranges.h>

#include "core/error.h"

namespace optimate::cpu {
namespace {

void expect_shape(const HostTensor& t, const char* role, std::initializer_list<int64_t> shape) {
  if (!std::equal(t.shape.begin(), t.shape.end(), shape.begin(), shape.end()))
    fail(ErrorCode::kInvalidFile, "tensor '{}' ({}) has shape [{}], expected [{}]", t.name, role,
         fmt::join(t.shape, ", "), fmt::join(shape, ", "));
  if (t.data.size() != dtype_row_bytes(t.dtype, static_cast<size_t>(t.num_elems())))
    fail(ErrorCode::kInvalidFile, "tensor '{}' ({}) holds {} bytes, expected {} for {} {}", t.name,
         role, t.data.size(), dtype_row_bytes(t.dtype, static_cast<size_t>(t.num_elems())),
         t.num_elems(), dtype_name(t.dtype));
}

// Appends the dequantized tensor to `dst`.
void append_f32(std::vector<float>& dst, const HostTensor& t) {
  const size_t offset = dst.size();
  dst.resize(offset + static_cast<size_t>(t.num_elems()));
  dequantize_row(t.dtype, t.data.data(), dst.data() + offset, t.num_elems());
}

std::vector<float> f32(const HostTensor& t) {
  std::vector<float> out;
  append_f32(out, t);
  return out;
}

// The Linear weights `parts` ([rows_i, cols] each, same cols) stacked into one matrix: their
// blocks as stored when all share a type the quantized kernels read, else fp32.
CpuMatrix stack(std::initializer_list<const HostTensor*> parts, KeepQuantized keep, bool repack) {
  CpuMatrix m;
  const HostTensor& first = **parts.begin();
  m.cols = first.dim(-1);
  bool quantized = keep && keep(first.dtype, m.cols);
  for (const HostTensor* t : parts) {
    m.rows += t->dim(0);
    quantized = quantized && t->dtype == first.dtype;
  }
  if (quantized) {
    m.dtype = first.dtype;
    m.blocks.reserve(static_cast<size_t>(m.rows * m.row_bytes()));
    for (const HostTensor* t : parts) m.blocks.insert(m.blocks.end(), t->data.begin(), t->data.end());
    if (repack) {  // one matrix's blocks at a time, so loading never holds two copies of the model
      m.q8 = pack_q8_matrix(m);
      std::vector<uint8_t>().swap(m.blocks);
    }
  } else {
    m.f32.reserve(static_cast<size_t>(m.rows * m.cols));
    for (const HostTensor* t : parts) append_f32(m.f32, *t);
  }
  return m;
}

void pack_experts(const ModelConfig& c, const LayerWeights& src, KeepQuantized keep, bool repack, CpuLayerWeights& dst) {
  const int64_t hidden = c.hidden_size, inter = c.moe.expert_intermediate_size;
  expect_shape(src.router, "router", {c.moe.num_experts, hidden});
  dst.router = stack({&src.router}, nullptr, false);
  if (static_cast<int64_t>(src.experts.size()) != c.moe.num_experts)
    fail(ErrorCode::kInvalidFile, "{} experts of weights, the config says {}", src.experts.size(), c.moe.num_experts);
  dst.experts.resize(src.experts.size());
  for (size_t e = 0; e < src.experts.size(); ++e) {
    const ExpertWeights& x = src.experts[e];
    expect_shape(x.w_gate, "expert gate projection", {inter, hidden});
    expect_shape(x.w_up, "expert up projection", {inter, hidden});
    expect_shape(x.w_down, "expert down projection", {hidden, inter});
    dst.experts[e].w_gate_up = stack({&x.w_gate, &x.w_up}, keep, repack);
    dst.experts[e].w_down = stack({&x.w_down}, keep, repack);
  }
}

}  // namespace

void CpuWeights::embedding_row(int64_t id, float* dst) const {
  const CpuMatrix& e = tok_embeddings;
  OPTIMATE_CHECK(id >= 0 && id < e.rows, "token id {} outside the embedding's {} rows", id, e.rows);
  if (!e.q8.empty())
    dequantize_q8_row(e.q8, id, dst);
  else if (e.is_quantized() && keeps_quantized(e.dtype, e.cols))
    dequantize_rows(e, id, 1, dst);
  else if (e.is_quantized())
    dequantize_row(e.dtype, e.row(id), dst, e.cols);
  else
    std::copy_n(e.f32.data() + id * e.cols, e.cols, dst);
}

int64_t CpuWeights::bytes() const {
  auto vec = [](const std::vector<float>& v) { return static_cast<int64_t>(v.size() * sizeof(float)); };
  int64_t n = tok_embeddings.bytes() + lm_head.bytes() + vec(final_norm);
  for (const CpuLayerWeights& l : layers) {
    n += vec(l.attn_norm) + l.wqkv.bytes() + vec(l.bqkv) + vec(l.q_norm) + vec(l.k_norm) + l.wo.bytes() +
         vec(l.ffn_norm) + l.w_gate_up.bytes() + l.w_down.bytes() + l.router.bytes();
    for (const CpuExpert& e : l.experts) n += e.w_gate_up.bytes() + e.w_down.bytes();
  }
  return n;
}

CpuWeights pack_cpu_weights(const ModelConfig& c, const ModelWeights& w, KeepQuantized keep, bool repack_q8,
                            int64_t vocab_rows) {
  if (vocab_rows == 0) vocab_rows = c.vocab_size;
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = c.num_heads * c.head_dim;
  const int64_t kv_dim = c.num_kv_heads * c.head_dim;
  if (static_cast<int64_t>(w.layers.size()) != c.num_layers)
    fail(ErrorCode::kInvalidFile, "model has {} layers of weights, config says {}", w.layers.size(),
         c.num_layers);

  CpuWeights out;
  expect_shape(w.tok_embeddings, "token embedding", {vocab_rows, hidden});
  expect_shape(w.final_norm, "final norm", {hidden});
  out.tok_embeddings = stack({&w.tok_embeddings}, keep, repack_q8);
  out.final_norm = f32(w.final_norm);
  const bool tied = w.lm_head.empty() || w.lm_head.data.data() == w.tok_embeddings.data.data();
  if (!tied) {
    expect_shape(w.lm_head, "lm_head", {vocab_rows, hidden});
    out.lm_head = stack({&w.lm_head}, keep, repack_q8);
  }

  out.layers.resize(w.layers.size());
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& src = w.layers[i];
    CpuLayerWeights& dst = out.layers[i];
    expect_shape(src.attn_norm, "attention norm", {hidden});
    expect_shape(src.wq, "q projection", {q_dim, hidden});
    expect_shape(src.wk, "k projection", {kv_dim, hidden});
    expect_shape(src.wv, "v projection", {kv_dim, hidden});
    expect_shape(src.wo, "output projection", {hidden, q_dim});
    expect_shape(src.ffn_norm, "ffn norm", {hidden});

    dst.attn_norm = f32(src.attn_norm);
    dst.wqkv = stack({&src.wq, &src.wk, &src.wv}, keep, repack_q8);
    if (src.bq || src.bk || src.bv) {
      if (!src.bq || !src.bk || !src.bv)
        fail(ErrorCode::kInvalidFile, "layer {}: q/k/v biases must come together", i);
      expect_shape(*src.bq, "q bias", {q_dim});
      expect_shape(*src.bk, "k bias", {kv_dim});
      expect_shape(*src.bv, "v bias", {kv_dim});
      append_f32(dst.bqkv, *src.bq);
      append_f32(dst.bqkv, *src.bk);
      append_f32(dst.bqkv, *src.bv);
    } else if (c.attention_bias) {
      fail(ErrorCode::kInvalidFile, "layer {}: config has attention bias but the q/k/v biases are missing", i);
    }
    if (c.qk_norm) {
      if (!src.q_norm || !src.k_norm) fail(ErrorCode::kInvalidFile, "layer {}: the q/k norms are missing", i);
      expect_shape(*src.q_norm, "q norm", {c.head_dim});
      expect_shape(*src.k_norm, "k norm", {c.head_dim});
      dst.q_norm = f32(*src.q_norm);
      dst.k_norm = f32(*src.k_norm);
    }
    dst.wo = stack({&src.wo}, keep, repack_q8);
    dst.ffn_norm = f32(src.ffn_norm);
    if (c.is_moe()) {
      pack_experts(c, src, keep, repack_q8, dst);
      continue;
    }
    expect_shape(src.w_gate, "gate projection", {c.intermediate_size, hidden});
    expect_shape(src.w_up, "up projection", {c.intermediate_size, hidden});
    expect_shape(src.w_down, "down projection", {hidden, c.intermediate_size});
    dst.w_gate_up = stack({&src.w_gate, &src.w_up}, keep, repack_q8);
    dst.w_down = stack({&src.w_down}, keep, repack_q8);
  }
  return out;
}

}  // namespace optimate::cpu
