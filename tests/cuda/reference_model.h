// A plain fp32 (fp64 accumulation) Llama forward over a whole token sequence, the CPU twin of
// the CUDA runner for small configs: no paging, no fusion, straight from the definitions. Keys
// and values may pass through a quantized KV block's store and load (kv/kv_format.h) per
// position, as the runner's cache keeps them.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/half.h"
#include "kv/kv_format.h"
#include "model/weights.h"

namespace optimate::cuda::testing {

class ReferenceModel {
 public:
  explicit ReferenceModel(const LoadedModel& m) : c_(m.config), inv_freq_(rope_inv_freq(m.config)) {
    const ModelWeights& w = m.weights;
    embed_ = to_f32(w.tok_embeddings);
    final_norm_ = to_f32(w.final_norm);
    lm_head_ = to_f32(w.lm_head);
    for (const LayerWeights& l : w.layers) {
      Layer L;
      L.attn_norm = to_f32(l.attn_norm);
      L.wq = to_f32(l.wq);
      L.wk = to_f32(l.wk);
      L.wv = to_f32(l.wv);
      L.wo = to_f32(l.wo);
      if (l.bq) L.bq = to_f32(*l.bq), L.bk = to_f32(*l.bk), L.bv = to_f32(*l.bv);
      L.ffn_norm = to_f32(l.ffn_norm);
      L.gate = to_f32(l.w_gate);
      L.up = to_f32(l.w_up);
      L.down = to_f32(l.w_down);
      layers_.push_back(std::move(L));
    }
  }

  // Logits [n, vocab] of every position of `tokens` (positions 0..n-1).
  std::vector<float> logits(const std::vector<int32_t>& tokens) const {
    return logits(tokens, [](int64_t) { return kv::KvPrecision::kF32; });
  }

  // The same with position p's keys and values rounded to bf16 and read back from a block of
  // precision_at(p) (full precision: fp32 as computed).
  std::vector<float> logits(const std::vector<int32_t>& tokens,
                            const std::function<kv::KvPrecision(int64_t)>& precision_at) const {
    const int64_t n = tokens.size(), H = c_.hidden_size, D = c_.head_dim;
    const int64_t Hq = c_.num_heads, Hkv = c_.num_kv_heads, I = c_.intermediate_size;
    std::vector<float> x(n * H);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < H; ++i) x[t * H + i] = embed_[tokens[t] * H + i];
    for (const Layer& L : layers_) {
      std::vector<float> h = norm(x, L.attn_norm, n);
      std::vector<float> q = linear(h, L.wq, L.bq, n, Hq * D, H);
      std::vector<float> k = linear(h, L.wk, L.bk, n, Hkv * D, H);
      std::vector<float> v = linear(h, L.wv, L.bv, n, Hkv * D, H);
      rope(q, n, Hq);
      rope(k, n, Hkv);
      for (int64_t t = 0; t < n; ++t) {
        const kv::KvPrecision p = precision_at(t);
        if (kv::is_full_precision(p)) continue;
        const kv::BlockLayout block(p, 1, 1, D);
        std::vector<uint8_t> bytes(static_cast<size_t>(block.total_bytes));
        for (std::vector<float>* x : {&k, &v})
          for (int64_t h = 0; h < Hkv; ++h) {
            float* row = x->data() + (t * Hkv + h) * D;
            for (int64_t i = 0; i < D; ++i) row[i] = bf16_to_f32(f32_to_bf16(row[i]));  // as the runner holds it
            kv::store_row(block, bytes.data(), 0, 0, row);
            kv::load_row(block, bytes.data(), 0, 0, row);
          }
      }
      std::vector<float> att(n * Hq * D, 0.0f);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t hh = 0; hh < Hq; ++hh) {
          const int64_t kvh = hh / (Hq / Hkv);
          std::vector<double> s(t + 1);
          double mx = -1e300;
          for (int64_t p = 0; p <= t; ++p) {
            double dot = 0;
            for (int64_t i = 0; i < D; ++i) dot += double(q[(t * Hq + hh) * D + i]) * k[(p * Hkv + kvh) * D + i];
            s[p] = dot / std::sqrt(double(D));
            mx = std::max(mx, s[p]);
          }
          double sum = 0;
          for (auto& e : s) sum += (e = std::exp(e - mx));
          for (int64_t i = 0; i < D; ++i) {
            double o = 0;
            for (int64_t p = 0; p <= t; ++p) o += s[p] * v[(p * Hkv + kvh) * D + i];
            att[(t * Hq + hh) * D + i] = float(o / sum);
          }
        }
      const std::vector<float> o = linear(att, L.wo, {}, n, H, Hq * D);
      for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
      h = norm(x, L.ffn_norm, n);
      const std::vector<float> g = linear(h, L.gate, {}, n, I, H);
      const std::vector<float> u = linear(h, L.up, {}, n, I, H);
      std::vector<float> a(n * I);
      for (size_t i = 0; i < a.size(); ++i) a[i] = float(g[i] / (1.0 + std::exp(-double(g[i]))) * u[i]);
      const std::vector<float> d = linear(a, L.down, {}, n, H, I);
      for (size_t i = 0; i < x.size(); ++i) x[i] += d[i];
    }
    return linear(norm(x, final_norm_, n), lm_head_, {}, n, c_.vocab_size, H);
  }

 private:
  struct Layer {
    std::vector<float> attn_norm, wq, wk, wv, wo, bq, bk, bv, ffn_norm, gate, up, down;
  };

  std::vector<float> norm(const std::vector<float>& x, const std::vector<float>& w, int64_t n) const {
    const int64_t H = c_.hidden_size;
    std::vector<float> out(x.size());
    for (int64_t t = 0; t < n; ++t) {
      double ss = 0;
      for (int64_t i = 0; i < H; ++i) ss += double(x[t * H + i]) * x[t * H + i];
      const double inv = 1.0 / std::sqrt(ss / H + c_.rms_norm_eps);
      for (int64_t i = 0; i < H; ++i) out[t * H + i] = float(x[t * H + i] * inv * w[i]);
    }
    return out;
  }

  static std::vector<float> linear(const std::vector<float>& x, const std::vector<float>& w,
                                   const std::vector<float>& b, int64_t n, int64_t out, int64_t in) {
    std::vector<float> y(n * out);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < out; ++j) {
        double acc = b.empty() ? 0.0 : b[j];
        const float* xr = x.data() + t * in;
        const float* wr = w.data() + j * in;
        for (int64_t i = 0; i < in; ++i) acc += double(xr[i]) * wr[i];
        y[t * out + j] = float(acc);
      }
    return y;
  }

  void rope(std::vector<float>& x, int64_t n, int64_t heads) const {
    const int64_t D = c_.head_dim;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          const double a = double(float(t) * inv_freq_[i]);
          float* r = x.data() + (t * heads + h) * D;
          const double x0 = r[i], x1 = r[i + D / 2];
          r[i] = float(x0 * std::cos(a) - x1 * std::sin(a));
          r[i + D / 2] = float(x1 * std::cos(a) + x0 * std::sin(a));
        }
  }

  ModelConfig c_;
  std::vector<float> inv_freq_;
  std::vector<float> embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
};

}  // namespace optimate::cuda::testing
