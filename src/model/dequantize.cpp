// Block dequantization of the GGML formats, bit-compatible with ggml's dequantize_row_* (and so
// with gguf-py's numpy versions): every product is formed in fp32 in the same order.
//
// Block layouts (little-endian, fp16 scales):
//   Q8_0  [d][32 x int8]                         x = d * q
//   Q4_0  [d][16 bytes]                          x = d * (nibble - 8); low nibbles are 0..15
//   Q4_1  [d][m][16 bytes]                       x = d * nibble + m
//   Q4_K  [d][dmin][12 bytes 6-bit scales/mins][128 bytes nibbles]   8 sub-blocks of 32
//   Q5_K  as Q4_K plus [32 bytes high bits] before the nibbles
//   Q6_K  [128 bytes low nibbles][64 bytes high 2-bits][16 int8 scales][d]  16 sub-blocks of 16
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "model/host_tensor.h"

namespace optimate {
namespace {

float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  for (int i = 0; i < 32; ++i) y[i] = d * static_cast<float>(static_cast<int8_t>(b[2 + i]));
}

void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>((qs[i] & 0x0F) - 8);
    y[i + 16] = d * static_cast<float>((qs[i] >> 4) - 8);
  }
}

void dequant_q4_1(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float m = load_f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>(qs[i] & 0x0F) + m;
    y[i + 16] = d * static_cast<float>(qs[i] >> 4) + m;
  }
}

// The 12 scale bytes of Q4_K/Q5_K pack eight 6-bit scales and eight 6-bit mins.
void k_scale_min(int j, const uint8_t* q, int* scale, int* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void dequant_q4_k(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  // Each 32-byte chunk of nibbles holds two sub-blocks: low nibbles, then high nibbles.
  for (int chunk = 0; chunk < 4; ++chunk) {
    int sc, m;
    k_scale_min(2 * chunk, scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    k_scale_min(2 * chunk + 1, scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) y[l] = d1 * static_cast<float>(q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) y[32 + l] = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
    y += 64;
  }
}

void dequant_q5_k(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  // Sub-block j takes its fifth bit from bit j of qh[l].
  for (int chunk = 0; chunk < 4; ++chunk) {
    int sc, m;
    k_scale_min(2 * chunk, scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    k_scale_min(2 * chunk + 1, scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    const int lo_bit = 2 * chunk, hi_bit = 2 * chunk + 1;
    for (int l = 0; l < 32; ++l) {
      const int q = (ql[l] & 0x0F) | (((qh[l] >> lo_bit) & 1) << 4);
      y[l] = d1 * static_cast<float>(q) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      const int q = (ql[l] >> 4) | (((qh[l] >> hi_bit) & 1) << 4);
      y[32 + l] = d2 * static_cast<float>(q) - m2;
    }
    ql += 32;
    y += 64;
  }
}

void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_f16(b + 208);
  // Two halves of 128 values; each uses 64 bytes of ql, 32 of qh and 8 scales.
  for (int half = 0; half < 2; ++half) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    ql += 64;
    qh += 32;
    sc += 8;
    y += 128;
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

}  // namespace

void dequantize_row(DType dtype, const uint8_t* src, float* dst, int64_t num_elems) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(num_elems) * 4);
      return;
    case DType::kF16:
      for (int64_t i = 0; i < num_elems; ++i) dst[i] = load_f16(src + 2 * i);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < num_elems; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    case DType::kI8:
    case DType::kI32:
      fail(ErrorCode::kUnsupported, "cannot dequantize integer dtype {}", dtype_name(dtype));
    default:
      break;
  }
  BlockFn fn = nullptr;
  switch (dtype) {
    case DType::kQ8_0: fn = dequant_q8_0; break;
    case DType::kQ4_0: fn = dequant_q4_0; break;
    case DType::kQ4_1: fn = dequant_q4_1; break;
    case DType::kQ4_K: fn = dequant_q4_k; break;
    case DType::kQ5_K: fn = dequant_q5_k; break;
    case DType::kQ6_K: fn = dequant_q6_k; break;
    default: fail(ErrorCode::kUnsupported, "no dequantizer for {}", dtype_name(dtype));
  }
  const int64_t block_elems = static_cast<int64_t>(dtype_block_elems(dtype));
  const size_t block_bytes = dtype_block_bytes(dtype);
  OPTIMATE_CHECK(num_elems % block_elems == 0, "{} elements is not a whole number of {} blocks",
                 num_elems, dtype_name(dtype));
  for (int64_t i = 0; i < num_elems / block_elems; ++i) {
    fn(src + static_cast<size_t>(i) * block_bytes, dst + i * block_elems);
  }
}

}  // namespace optimate
