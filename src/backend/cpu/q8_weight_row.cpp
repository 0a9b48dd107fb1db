#include "backend/cpu/q8_weight_row.h"

#include <immintrin.h>

#include <cstring>

#include "core/error.h"

namespace optimate::cpu {
namespace {

inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return _cvtsh_ss(h);
}

inline __m128i load16(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline void store16(uint8_t* p, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v); }
inline void store32(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }

// 16 bytes of nibbles: low nibbles are elements 0..15, high nibbles 16..31.
inline void nibbles16(const uint8_t* src, uint8_t* q) {
  const __m128i raw = load16(src), mask = _mm_set1_epi8(0x0F);
  store16(q, _mm_and_si128(raw, mask));
  store16(q + 16, _mm_and_si128(_mm_srli_epi16(raw, 4), mask));
}

inline void set_groups(float* scale, float* offset, int64_t g, float s, float o) {
  scale[g] = scale[g + 1] = s;
  offset[g] = offset[g + 1] = o;
}

// The 12 scale bytes of Q4_K/Q5_K: eight 6-bit scales and eight 6-bit mins (ggml's layout).
inline void k_scale_min(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void unpack_q8_0(const uint8_t* b, int64_t nb, bool signed_q8, UnpackedRow& out) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t k = 0; k < nb; ++k, b += 34) {
    const float d = f16(b);
    const __m256i v = load32(b + 2);
    store32(out.q.data() + 32 * k, signed_q8 ? v : _mm256_xor_si256(v, flip));  // q + 128
    set_groups(out.scale.data(), out.offset.data(), 2 * k, d, signed_q8 ? 0.0f : -128.0f * d);
  }
}

void unpack_q4_0(const uint8_t* b, int64_t nb, UnpackedRow& out) {
  for (int64_t k = 0; k < nb; ++k, b += 18) {
    const float d = f16(b);
    nibbles16(b + 2, out.q.data() + 32 * k);
    set_groups(out.scale.data(), out.offset.data(), 2 * k, d, -8.0f * d);
  }
}

void unpack_q4_1(const uint8_t* b, int64_t nb, UnpackedRow& out) {
  for (int64_t k = 0; k < nb; ++k, b += 20) {
    nibbles16(b + 4, out.q.data() + 32 * k);
    set_groups(out.scale.data(), out.offset.data(), 2 * k, f16(b), f16(b + 2));
  }
}

// Q4_K (with_high_bits false) and Q5_K: 256 weights in 8 sub-blocks of 32, each pair of
// sub-blocks sharing 32 bytes of nibbles (low nibbles first); Q5_K's fifth bit of sub-block j
// is bit j of qh[l].
template <bool kFive>
void unpack_k4(const uint8_t* b, int64_t nsb, UnpackedRow& out) {
  constexpr int64_t kBytes = kFive ? 176 : 144;
  const __m256i mask = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  for (int64_t s = 0; s < nsb; ++s, b += kBytes) {
    const float d = f16(b), dmin = f16(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* qs = b + (kFive ? 48 : 16);
    uint8_t* q = out.q.data() + 256 * s;
    const __m256i qh = kFive ? load32(b + 16) : _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = load32(qs + 32 * c);
      __m256i lo = _mm256_and_si256(raw, mask);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
      if constexpr (kFive) {
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
      }
      store32(q + 64 * c, lo);
      store32(q + 64 * c + 32, hi);
    }
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      k_scale_min(j, scales, sc, m);
      set_groups(out.scale.data(), out.offset.data(), 16 * s + 2 * j, d * static_cast<float>(sc),
                 -dmin * static_cast<float>(m));
    }
  }
}

// Q6_K: 256 weights in 16 groups of 16 with int8 scales; values are 4 low bits (ql) and 2 high
// bits (qh) minus 32, in two halves of 128 (ggml's layout).
void unpack_q6_k(const uint8_t* b, int64_t nsb, UnpackedRow& out) {
  const __m256i mask4 = _mm256_set1_epi8(0x0F), mask2 = _mm256_set1_epi8(0x03);
  for (int64_t s = 0; s < nsb; ++s, b += 210) {
    const float d = f16(b + 208);
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    uint8_t* q = out.q.data() + 256 * s;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b + 64 * half;
      const __m256i qh = load32(b + 128 + 32 * half);
      const __m256i l0 = load32(ql), l1 = load32(ql + 32);
      const auto high = [&](int shift) {
        return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, shift), mask2), 4);
      };
      uint8_t* qo = q + 128 * half;
      store32(qo, _mm256_or_si256(_mm256_and_si256(l0, mask4), high(0)));
      store32(qo + 32, _mm256_or_si256(_mm256_and_si256(l1, mask4), high(2)));
      store32(qo + 64, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), mask4), high(4)));
      store32(qo + 96, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), mask4), high(6)));
    }
    for (int g = 0; g < 16; ++g) {
      const float gs = d * static_cast<float>(sc[g]);
      out.scale[16 * s + g] = gs;
      out.offset[16 * s + g] = -32.0f * gs;
    }
  }
}

}  // namespace

bool has_q8_kernel(DType dtype, int64_t cols) {
  switch (dtype) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1: return cols > 0 && cols % 32 == 0;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: return cols > 0 && cols % 256 == 0;
    default: return false;
  }
}

void unpack_weight_row(const CpuMatrix& w, int64_t r, bool signed_q8, UnpackedRow& out) {
  OPTIMATE_CHECK(w.is_quantized() && has_q8_kernel(w.dtype, w.cols), "no integer kernel for {} rows of {}",
                 dtype_name(w.dtype), w.cols);
  OPTIMATE_CHECK(r >= 0 && r < w.rows, "row {} of {}", r, w.rows);
  const int64_t cols = w.cols, groups = cols / kWeightGroup;
  if (out.cols != cols) {
    out.cols = cols;
    out.q.assign(static_cast<size_t>(cols + 64), 0);
    out.scale.assign(static_cast<size_t>(groups + 16), 0.0f);
    out.offset.assign(static_cast<size_t>(groups + 16), 0.0f);
  }
  out.is_signed = signed_q8 && w.dtype == DType::kQ8_0;
  const uint8_t* b = w.row(r);
  switch (w.dtype) {
    case DType::kQ8_0: return unpack_q8_0(b, cols / 32, signed_q8, out);
    case DType::kQ4_0: return unpack_q4_0(b, cols / 32, out);
    case DType::kQ4_1: return unpack_q4_1(b, cols / 32, out);
    case DType::kQ4_K: return unpack_k4<false>(b, cols / 256, out);
    case DType::kQ5_K: return unpack_k4<true>(b, cols / 256, out);
    case DType::kQ6_K: return unpack_q6_k(b, cols / 256, out);
    default: break;
  }
}

}  // namespace optimate::cpu
