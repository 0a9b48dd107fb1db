#include "kv/kv_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace optimate::kv {
namespace {

// Round half to even (the default rounding mode), as the GPU's __float2int_rn.
int32_t round_even(float x) { return static_cast<int32_t>(std::nearbyint(x)); }

float read_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

void write_f32(uint8_t* p, float f) { std::memcpy(p, &f, 4); }

uint16_t read_u16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

void write_u16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

// fp16 (scale, min) of values in [lo, hi], rounded as the decoder reads them.
struct Int4Params {
  uint16_t scale_h = 0, min_h = 0;
  float scale = 0.0f, min = 0.0f;
};
Int4Params int4_params(float lo, float hi) {
  Int4Params p;
  p.min_h = f32_to_f16(lo);
  p.min = f16_to_f32(p.min_h);
  p.scale_h = f32_to_f16((hi - p.min) / 15.0f);
  p.scale = f16_to_f32(p.scale_h);
  return p;
}
int32_t int4_code(float x, const Int4Params& p) {
  return p.scale == 0.0f ? 0 : std::clamp(round_even((x - p.min) / p.scale), 0, 15);
}

float amax(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

}  // namespace

int32_t precision_code(KvPrecision p) {
  switch (p) {
    case KvPrecision::kF32:
    case KvPrecision::kBF16: return 0;
    case KvPrecision::kFP8: return 1;
    case KvPrecision::kInt8: return 2;
    case KvPrecision::kInt4: return 3;
  }
  return 0;
}

KvPrecision precision_of_code(int32_t code, KvPrecision full) {
  switch (code) {
    case 0: return full;
    case 1: return KvPrecision::kFP8;
    case 2: return KvPrecision::kInt8;
    case 3: return KvPrecision::kInt4;
  }
  fail(ErrorCode::kInternal, "KV block-table entry with precision code {}", code);
}

BlockLayout::BlockLayout(KvPrecision p, int64_t kvh, int64_t bs, int64_t hd, Int4Keys keys)
    : precision(p), num_kv_heads(kvh), block_size(bs), head_dim(hd),
      channel_scales(p == KvPrecision::kInt4 && keys == Int4Keys::kPerChannel) {
  if (kvh <= 0 || bs <= 0 || hd <= 0)
    fail(ErrorCode::kInvalidArgument, "KV block shape must be positive ({} heads, {} tokens, head dim {})",
         kvh, bs, hd);
  switch (p) {
    case KvPrecision::kF32: row_bytes = 4 * hd; break;
    case KvPrecision::kBF16: row_bytes = 2 * hd; break;
    case KvPrecision::kFP8:
    case KvPrecision::kInt8: row_bytes = hd; scale_bytes = 4; break;
    case KvPrecision::kInt4:
      if (hd % kInt4Group != 0)
        fail(ErrorCode::kUnsupported, "int4 KV needs a head dim that is a multiple of {}, got {}",
             kInt4Group, hd);
      row_bytes = hd / 2;
      scale_bytes = channel_scales ? 4 * hd : 4 * (hd / kInt4Group);
      break;
  }
  scale_offset = kvh * bs * row_bytes;
  total_bytes = scale_offset + (channel_scales ? kvh : kvh * bs) * scale_bytes;
}

void store_row(const BlockLayout& l, uint8_t* block, int64_t head, int64_t token, const float* x) {
  uint8_t* row = block + l.row_offset(head, token);
  uint8_t* scales = block + l.scale_row_offset(head, token);
  const int64_t hd = l.head_dim;
  switch (l.precision) {
    case KvPrecision::kF32:
      std::memcpy(row, x, 4 * hd);
      return;
    case KvPrecision::kBF16:
      for (int64_t i = 0; i < hd; ++i) write_u16(row + 2 * i, f32_to_bf16(x[i]));
      return;
    case KvPrecision::kInt8: {
      const float scale = amax(x, hd) / 127.0f;
      write_f32(scales, scale);
      for (int64_t i = 0; i < hd; ++i) {
        const int32_t q = scale == 0.0f ? 0 : std::clamp(round_even(x[i] / scale), -127, 127);
        row[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
      }
      return;
    }
    case KvPrecision::kFP8: {
      const float scale = amax(x, hd) / 448.0f;
      write_f32(scales, scale);
      for (int64_t i = 0; i < hd; ++i) row[i] = scale == 0.0f ? 0 : f32_to_e4m3(x[i] / scale);
      return;
    }
    case KvPrecision::kInt4: {
      OPTIMATE_CHECK(!l.channel_scales, "int4 keys scaled per channel are written a block at a time");
      std::memset(row, 0, hd / 2);
      for (int64_t g = 0; g < hd / kInt4Group; ++g) {
        const float* xg = x + g * kInt4Group;
        const auto [lo, hi] = std::minmax_element(xg, xg + kInt4Group);
        const Int4Params p = int4_params(*lo, *hi);
        write_u16(scales + 4 * g, p.scale_h);
        write_u16(scales + 4 * g + 2, p.min_h);
        for (int64_t i = 0; i < kInt4Group; ++i) {
          const int64_t e = g * kInt4Group + i;
          row[e / 2] |= static_cast<uint8_t>(int4_code(xg[i], p) << (4 * (e % 2)));
        }
      }
      return;
    }
  }
}

void store_block(const BlockLayout& l, uint8_t* block, const float* rows) {
  const int64_t hd = l.head_dim, bs = l.block_size;
  if (l.row_writable()) {
    for (int64_t h = 0; h < l.num_kv_heads; ++h)
      for (int64_t t = 0; t < bs; ++t) store_row(l, block, h, t, rows + (h * bs + t) * hd);
    return;
  }
  // int4 keys, a (scale, min) pair per channel over the block's tokens.
  for (int64_t h = 0; h < l.num_kv_heads; ++h) {
    const float* xh = rows + h * bs * hd;
    uint8_t* scales = block + l.scale_row_offset(h, 0);
    std::memset(block + l.row_offset(h, 0), 0, bs * l.row_bytes);
    for (int64_t c = 0; c < hd; ++c) {
      float lo = xh[c], hi = xh[c];
      for (int64_t t = 1; t < bs; ++t) lo = std::min(lo, xh[t * hd + c]), hi = std::max(hi, xh[t * hd + c]);
      const Int4Params p = int4_params(lo, hi);
      write_u16(scales + 4 * c, p.scale_h);
      write_u16(scales + 4 * c + 2, p.min_h);
      for (int64_t t = 0; t < bs; ++t)
        block[l.row_offset(h, t) + c / 2] |= static_cast<uint8_t>(int4_code(xh[t * hd + c], p) << (4 * (c % 2)));
    }
  }
}

void load_row(const BlockLayout& l, const uint8_t* block, int64_t head, int64_t token, float* out) {
  const uint8_t* row = block + l.row_offset(head, token);
  const uint8_t* scales = block + l.scale_row_offset(head, token);
  const int64_t hd = l.head_dim;
  switch (l.precision) {
    case KvPrecision::kF32:
      std::memcpy(out, row, 4 * hd);
      return;
    case KvPrecision::kBF16:
      for (int64_t i = 0; i < hd; ++i) out[i] = bf16_to_f32(read_u16(row + 2 * i));
      return;
    case KvPrecision::kInt8: {
      const float scale = read_f32(scales);
      for (int64_t i = 0; i < hd; ++i) out[i] = static_cast<float>(static_cast<int8_t>(row[i])) * scale;
      return;
    }
    case KvPrecision::kFP8: {
      const float scale = read_f32(scales);
      for (int64_t i = 0; i < hd; ++i) out[i] = e4m3_to_f32(row[i]) * scale;
      return;
    }
    case KvPrecision::kInt4: {
      // Per channel: pair c of the head; per token: pair e / group of the row.
      const int64_t group = l.channel_scales ? 1 : kInt4Group;
      for (int64_t e = 0; e < hd; ++e) {
        const float scale = f16_to_f32(read_u16(scales + 4 * (e / group)));
        const float min = f16_to_f32(read_u16(scales + 4 * (e / group) + 2));
        const int32_t q = (row[e / 2] >> (4 * (e % 2))) & 0xf;
        out[e] = std::fma(static_cast<float>(q), scale, min);
      }
      return;
    }
  }
}

uint8_t f32_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= 448.0f) return sign | 0x7e;  // saturate (infinities too)
  if (a < 0.015625f) {                  // below 2^-6: subnormal, steps of 2^-9
    const int32_t q = round_even(a * 512.0f);  // q == 8 is the smallest normal, 0x08
    return sign | static_cast<uint8_t>(q);
  }
  int exp = 0;
  const float f = std::frexp(a, &exp);   // a = f * 2^exp, f in [0.5, 1)
  int e = exp - 1;                       // a = (2f) * 2^e, 2f in [1, 2)
  int32_t m = round_even((2.0f * f - 1.0f) * 8.0f);
  if (m == 8) {
    m = 0;
    ++e;
  }
  const int32_t field = e + 7;
  if (field > 15 || (field == 15 && m == 7)) return sign | 0x7e;
  return sign | static_cast<uint8_t>((field << 3) | m);
}

float e4m3_to_f32(uint8_t code) {
  const int32_t field = (code >> 3) & 0xf;
  const int32_t m = code & 0x7;
  if (field == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  const float v = field == 0 ? std::ldexp(static_cast<float>(m), -9)
                             : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, field - 7);
  return (code & 0x80) ? -v : v;
}

}  // namespace optimate::kv
