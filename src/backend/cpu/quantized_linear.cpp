#include "backend/cpu/quantized_linear.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/simd.h"
#include "core/error.h"

namespace optimate::cpu {
namespace {

constexpr int kBlock = 32;
constexpr int kGroup = 8;  // tokens per pass over a row's blocks

inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return _cvtsh_ss(h);
}

// One block's 32 quantized values as four vectors of eight floats (element order), with the
// block's scale d and offset m: weight i = d * q[i] + m.
struct Widened {
  __m256 q[4];
  float d;
  float m;
};

template <DType T>
inline void widen(const uint8_t* b, Widened& w) {
  if constexpr (T == DType::kQ8_0) {
    w.d = load_f16(b);
    w.m = 0.0f;
    for (int j = 0; j < 4; ++j) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * j));
      w.q[j] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
    }
  } else {  // Q4_1: elements 0..15 are the low nibbles of the 16 bytes, 16..31 the high ones
    w.d = load_f16(b);
    w.m = load_f16(b + 2);
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(raw, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
    w.q[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
    w.q[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
    w.q[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
    w.q[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
  }
}

// M tokens (x rows of `cols`) against rows [row0, row0 + rows) of w. Per block and token:
// d * (q . x) into a vector accumulator, and for Q4_1 m * sum(x) from the precomputed block
// sums `xsum` [M, cols / 32].
template <DType T, int M>
void rows_kernel(const float* x, const float* xsum, const CpuMatrix& w, float* y,
                 int64_t out_stride, int64_t row0, int64_t rows, bool accumulate) {
  const int64_t cols = w.cols, nb = cols / kBlock;
  const int64_t bb = static_cast<int64_t>(dtype_block_bytes(T));
  for (int64_t r = row0; r < row0 + rows; ++r) {
    const uint8_t* wr = w.row(r);
    __m256 acc[M];
    float macc[M];
    for (int t = 0; t < M; ++t) {
      acc[t] = _mm256_setzero_ps();
      macc[t] = 0.0f;
    }
    for (int64_t b = 0; b < nb; ++b) {
      Widened blk;
      widen<T>(wr + b * bb, blk);
      const __m256 d = _mm256_set1_ps(blk.d);
      for (int t = 0; t < M; ++t) {
        const float* xt = x + t * cols + b * kBlock;
        const __m256 s01 = _mm256_fmadd_ps(blk.q[1], _mm256_loadu_ps(xt + 8), _mm256_mul_ps(blk.q[0], _mm256_loadu_ps(xt)));
        const __m256 s23 = _mm256_fmadd_ps(blk.q[3], _mm256_loadu_ps(xt + 24), _mm256_mul_ps(blk.q[2], _mm256_loadu_ps(xt + 16)));
        acc[t] = _mm256_fmadd_ps(d, _mm256_add_ps(s01, s23), acc[t]);
        if constexpr (T == DType::kQ4_1) macc[t] += blk.m * xsum[t * nb + b];
      }
    }
    for (int t = 0; t < M; ++t) {
      const float v = hsum(acc[t]) + macc[t];
      float& out = y[t * out_stride + r];
      out = accumulate ? out + v : v;  // never reads y unless asked: it may hold NaN
    }
  }
}

template <DType T>
void group(const float* x, const float* xsum, const CpuMatrix& w, float* y, int64_t m,
           int64_t out_stride, int64_t row0, int64_t rows, bool accumulate) {
  switch (m) {
    case 1: return rows_kernel<T, 1>(x, xsum, w, y, out_stride, row0, rows, accumulate);
    case 2: return rows_kernel<T, 2>(x, xsum, w, y, out_stride, row0, rows, accumulate);
    case 3: return rows_kernel<T, 3>(x, xsum, w, y, out_stride, row0, rows, accumulate);
    case 4: return rows_kernel<T, 4>(x, xsum, w, y, out_stride, row0, rows, accumulate);
    case 5: return rows_kernel<T, 5>(x, xsum, w, y, out_stride, row0, rows, accumulate);
    case 6: return rows_kernel<T, 6>(x, xsum, w, y, out_stride, row0, rows, accumulate);
    case 7: return rows_kernel<T, 7>(x, xsum, w, y, out_stride, row0, rows, accumulate);
    default: return rows_kernel<T, 8>(x, xsum, w, y, out_stride, row0, rows, accumulate);
  }
}

// d * q + m for `blocks` consecutive blocks, 32 floats each.
template <DType T>
void widen_rows(const uint8_t* src, int64_t blocks, float* dst) {
  const int64_t bb = static_cast<int64_t>(dtype_block_bytes(T));
  for (int64_t b = 0; b < blocks; ++b) {
    Widened blk;
    widen<T>(src + b * bb, blk);
    const __m256 d = _mm256_set1_ps(blk.d), m = _mm256_set1_ps(blk.m);
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(dst + b * kBlock + 8 * j, _mm256_fmadd_ps(d, blk.q[j], m));
  }
}

void check_rows(const CpuMatrix& w, int64_t row0, int64_t rows) {
  OPTIMATE_CHECK(!w.blocks.empty() && keeps_quantized(w.dtype, w.cols),
                 "no quantized kernel for {} rows of {}", dtype_name(w.dtype), w.cols);
  OPTIMATE_CHECK(row0 >= 0 && rows >= 0 && row0 + rows <= w.rows, "rows [{}, {}) of {}", row0,
                 row0 + rows, w.rows);
}

}  // namespace

int64_t CpuMatrix::row_bytes() const {
  return static_cast<int64_t>(dtype_row_bytes(dtype, static_cast<size_t>(cols)));
}

int64_t CpuMatrix::bytes() const {
  return static_cast<int64_t>(blocks.size() + f32.size() * sizeof(float)) + q8.bytes();
}

bool keeps_quantized(DType dtype, int64_t cols) {
  return (dtype == DType::kQ8_0 || dtype == DType::kQ4_1) && cols > 0 && cols % kBlock == 0;
}

void quantized_linear_rows(const float* x, const CpuMatrix& w, float* y, int64_t num_tokens,
                           int64_t out_stride, int64_t row0, int64_t rows, bool accumulate) {
  check_rows(w, row0, rows);
  if (rows == 0) return;
  const int64_t nb = w.cols / kBlock;
  // Block sums of x, for Q4_1's offsets.
  thread_local std::vector<float> xsum;
  if (w.dtype == DType::kQ4_1) {
    xsum.resize(static_cast<size_t>(num_tokens * nb));
    for (int64_t t = 0; t < num_tokens; ++t)
      for (int64_t b = 0; b < nb; ++b) {
        const float* xb = x + t * w.cols + b * kBlock;
        float s = 0.0f;
        for (int i = 0; i < kBlock; ++i) s += xb[i];
        xsum[static_cast<size_t>(t * nb + b)] = s;
      }
  }
  for (int64_t t0 = 0; t0 < num_tokens; t0 += kGroup) {
    const int64_t m = std::min<int64_t>(kGroup, num_tokens - t0);
    const float* xg = x + t0 * w.cols;
    float* yg = y + t0 * out_stride;
    if (w.dtype == DType::kQ8_0)
      group<DType::kQ8_0>(xg, nullptr, w, yg, m, out_stride, row0, rows, accumulate);
    else
      group<DType::kQ4_1>(xg, xsum.data() + t0 * nb, w, yg, m, out_stride, row0, rows, accumulate);
  }
}

void dequantize_rows(const CpuMatrix& w, int64_t row0, int64_t rows, float* dst) {
  check_rows(w, row0, rows);
  if (w.dtype == DType::kQ8_0)
    widen_rows<DType::kQ8_0>(w.row(row0), rows * w.cols / kBlock, dst);
  else
    widen_rows<DType::kQ4_1>(w.row(row0), rows * w.cols / kBlock, dst);
}

}  // namespace optimate::cpu
