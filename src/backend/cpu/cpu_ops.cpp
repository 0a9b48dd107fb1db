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

}  // namespace

// Runs fn(t0, t1) over rows [0, num_tokens): on the pool in chunks of kMinRowsPerThread rows
// when there are enough of them, else at once on the calling thread.
template <typename Fn>
void for_row_chunks(int64_t num_tokens, CpuThreadPool* pool, const Fn& fn) {
  if (!pool || num_tokens < kMinRowsPerThread * 2) return fn(int64_t{0}, num_tokens);
  pool->run((num_tokens + kMinRowsPerThread - 1) / kMinRowsPerThread, [&](int64_t c, int) {
    fn(c * kMinRowsPerThread, std::min(num_tokens, (c + 1) * kMinRowsPerThread));
  });
}

void rms_norm(const float* x, const float* weight, float* out, int64_t num_tokens, int64_t dim,
              float eps, CpuThreadPool* pool) {
  for_row_chunks(num_tokens, pool, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* xr = x + t * dim;
      float* yr = out + t * dim;
      float sum_sq = 0.0f;
#pragma omp simd reduction(+ : sum_sq)
      for (int64_t i = 0; i < dim; ++i) sum_sq += xr[i] * xr[i];
      const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(dim) + eps);
#pragma omp simd
      for (int64_t i = 0; i < dim; ++i) yr[i] = weight[i] * (xr[i] * inv_rms);
    }
  });
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

void silu_mul(const float* gate_up, float* out, int64_t num_tokens, int64_t dim, CpuThreadPool* pool) {
  for_row_chunks(num_tokens, pool, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* g = gate_up + t * 2 * dim;
      const float* u = g + dim;
      float* o = out + t * dim;
      for (int64_t i = 0; i < dim; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    }
  });
}

}  // namespace optimate::cpu
