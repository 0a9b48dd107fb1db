#include "backend/cpu/cpu_ops.h"

#include "backend/cpu/small_m_linear.h"

#include <algorithm>
#include <cmath>

#include <cblas.h>
#include <omp.h>

namespace optimate::cpu {
namespace {

// Rows of an element-wise op worth a thread hand-off.
constexpr int64_t kMinRowsPerThread = 8;

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

}  // namespace

void rms_norm(const float* x, const float* weight, float* out, int64_t num_tokens, int64_t dim,
              float eps, int num_threads) {
#pragma omp parallel for num_threads(num_threads) if (num_threads > 1 && num_tokens >= kMinRowsPerThread * 2)
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* xr = x + t * dim;
    float* yr = out + t * dim;
    float sum_sq = 0.0f;
#pragma omp simd reduction(+ : sum_sq)
    for (int64_t i = 0; i < dim; ++i) sum_sq += xr[i] * xr[i];
    const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(dim) + eps);
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) yr[i] = weight[i] * (xr[i] * inv_rms);
  }
}

void use_single_threaded_blas() { openblas_set_num_threads(1); }

namespace {

// Runs run(row0, rows) over slices of out_dim rows, one per thread (whole cache lines of y),
// or at once when the work (multiply-adds) is below a thread hand-off's worth.
template <typename Run>
void for_row_slices(int64_t out_dim, int64_t work, int num_threads, const Run& run) {
  if (num_threads <= 1 || work < (int64_t{1} << 16)) {
    run(int64_t{0}, out_dim);
    return;
  }
#pragma omp parallel num_threads(num_threads)
  {
    const int64_t n = omp_get_num_threads();
    const int64_t chunk = ((out_dim + n - 1) / n + 15) / 16 * 16;
    const int64_t row0 = std::min<int64_t>(out_dim, omp_get_thread_num() * chunk);
    run(row0, std::min(out_dim, row0 + chunk) - row0);
  }
}

// y[:, row0 .. row0 + rows) (+)= x w_slice^T through sgemm; w_slice is [rows, in_dim].
void sgemm_rows(const float* x, const float* w_slice, float* y, int64_t num_tokens, int64_t in_dim,
                int64_t out_dim, int64_t row0, int64_t rows, float beta) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(num_tokens),
              static_cast<blasint>(rows), static_cast<blasint>(in_dim), 1.0f, x,
              static_cast<blasint>(in_dim), w_slice, static_cast<blasint>(in_dim), beta, y + row0,
              static_cast<blasint>(out_dim));
}

}  // namespace

void linear(const float* x, const float* w, float* y, int64_t num_tokens, int64_t in_dim,
            int64_t out_dim, bool accumulate, int num_threads) {
  const float beta = accumulate ? 1.0f : 0.0f;
  // Rows of w computed by one call; y's columns [row0, row0 + rows).
  for_row_slices(out_dim, num_tokens * in_dim * out_dim, num_threads, [&](int64_t row0, int64_t rows) {
    if (rows <= 0) return;
    const float* ws = w + row0 * in_dim;
    if (num_tokens > 1 && num_tokens <= kSmallMaxTokens) {
      small_m_linear(x, w, y, num_tokens, in_dim, out_dim, row0, rows, accumulate);
    } else if (num_tokens == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(rows), static_cast<blasint>(in_dim),
                  1.0f, ws, static_cast<blasint>(in_dim), x, 1, beta, y + row0, 1);
    } else {
      sgemm_rows(x, ws, y, num_tokens, in_dim, out_dim, row0, rows, beta);
    }
  });
}

void linear(const float* x, const CpuMatrix& w, float* y, int64_t num_tokens, bool accumulate,
            int num_threads) {
  if (!w.is_quantized()) {
    linear(x, w.f32.data(), y, num_tokens, w.cols, w.rows, accumulate, num_threads);
    return;
  }
  const int64_t in_dim = w.cols, out_dim = w.rows;
  for_row_slices(out_dim, num_tokens * in_dim * out_dim, num_threads, [&](int64_t row0, int64_t rows) {
    if (rows <= 0) return;
    if (num_tokens <= kQuantizedMaxTokens) {
      quantized_linear_rows(x, w, y, num_tokens, out_dim, row0, rows, accumulate);
      return;
    }
    // Long prefills: fp32 copies of a few weight rows at a time (up to 256 rows, about 1 MB),
    // each used by every token.
    const int64_t kRows = std::clamp<int64_t>((int64_t{1} << 18) / in_dim / 16 * 16, 16, 256);
    thread_local std::vector<float> slice;
    slice.resize(static_cast<size_t>(kRows * in_dim));
    for (int64_t r = row0; r < row0 + rows; r += kRows) {
      const int64_t n = std::min(kRows, row0 + rows - r);
      dequantize_rows(w, r, n, slice.data());
      sgemm_rows(x, slice.data(), y, num_tokens, in_dim, out_dim, r, n, accumulate ? 1.0f : 0.0f);
    }
  });
}

void add_bias(float* y, const float* bias, int64_t num_tokens, int64_t out_dim) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    float* yr = y + t * out_dim;
#pragma omp simd
    for (int64_t i = 0; i < out_dim; ++i) yr[i] += bias[i];
  }
}

void rope_tables(std::span<const int64_t> positions, std::span<const float> inv_freq, float* cos,
                 float* sin) {
  const size_t half = inv_freq.size();
  for (size_t t = 0; t < positions.size(); ++t) {
    const float pos = static_cast<float>(positions[t]);
    for (size_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      cos[t * half + i] = std::cos(angle);
      sin[t * half + i] = std::sin(angle);
    }
  }
}

void apply_rope(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                int64_t row_stride, const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int64_t h = 0; h < num_heads; ++h) {
      float* v = x + t * row_stride + h * head_dim;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = v[i];
        const float x2 = v[i + half];
        v[i] = x1 * c[i] - x2 * s[i];
        v[i + half] = x2 * c[i] + x1 * s[i];
      }
    }
  }
}

void silu_mul(const float* gate_up, float* out, int64_t num_tokens, int64_t dim, int num_threads) {
#pragma omp parallel for num_threads(num_threads) if (num_threads > 1 && num_tokens >= kMinRowsPerThread * 2)
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* g = gate_up + t * 2 * dim;
    const float* u = g + dim;
    float* o = out + t * dim;
    for (int64_t i = 0; i < dim; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

void write_kv(const float* k, const float* v, int64_t row_stride, float* k_cache, float* v_cache,
              std::span<const AttentionSeq> seqs, const AttentionDims& dims) {
  const int64_t hd = dims.head_dim;
  for (const AttentionSeq& seq : seqs) {
    for (int64_t i = 0; i < seq.num_tokens; ++i) {
      const int64_t pos = seq.start_pos + i;
      const int64_t block = seq.block_table[pos / dims.block_size];
      const int64_t slot = pos % dims.block_size;
      const float* kr = k + (seq.first_row + i) * row_stride;
      const float* vr = v + (seq.first_row + i) * row_stride;
      for (int64_t h = 0; h < dims.num_kv_heads; ++h) {
        const int64_t off = ((block * dims.num_kv_heads + h) * dims.block_size + slot) * hd;
        std::copy_n(kr + h * hd, hd, k_cache + off);
        std::copy_n(vr + h * hd, hd, v_cache + off);
      }
    }
  }
}

void paged_attention(const float* q, int64_t q_stride, const float* k_cache, const float* v_cache,
                     float* out, std::span<const AttentionSeq> seqs, const AttentionDims& dims,
                     float scale, int num_threads, AttentionScratch& scratch) {
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
  const int threads = work < (int64_t{1} << 18)
                          ? 1
                          : static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(num_threads, num_items)));
  if (static_cast<int>(scratch.scores.size()) < threads) scratch.scores.resize(threads);
  for (int i = 0; i < threads; ++i)
    if (static_cast<int64_t>(scratch.scores[i].size()) < group * max_ctx)
      scratch.scores[i].resize(group * max_ctx);

#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t item = 0; item < num_items; ++item) {
    const int64_t row = item / nkv;
    const int64_t kvh = item % nkv;
    const AttentionSeq& seq = seqs[seq_of_row(seqs, row)];
    const int64_t ctx = seq.start_pos + (row - seq.first_row) + 1;
    float* scores = scratch.scores[omp_get_thread_num()].data();  // [group, ctx]
    const float* qg = q + row * q_stride + kvh * group * hd;
    float* og = out + row * dims.num_heads * hd + kvh * group * hd;

    for (int64_t j0 = 0; j0 < ctx; j0 += bs) {
      const int64_t block = seq.block_table[j0 / bs];
      const float* kb = k_cache + (block * nkv + kvh) * bs * hd;
      const int64_t n = std::min(bs, ctx - j0);
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
      const int64_t block = seq.block_table[j0 / bs];
      const float* vb = v_cache + (block * nkv + kvh) * bs * hd;
      const int64_t n = std::min(bs, ctx - j0);
      for (int64_t s = 0; s < n; ++s)
        for (int64_t g = 0; g < group; ++g) axpy(scores[g * ctx + j0 + s], vb + s * hd, og + g * hd, hd);
    }
  }
}

}  // namespace optimate::cpu
