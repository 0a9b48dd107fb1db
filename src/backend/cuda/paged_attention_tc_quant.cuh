// The tensor-core decode kernel's (paged_attention_tc.cu) chunk of keys, its online softmax,
// and its reading of quantized blocks.
//
// A quantized chunk runs its mma in fp16 on operands converted from the codes with byte
// permutes (kv_quant.cuh), never through fp32:
// - fp8 / int8: S = Q C^T on the raw codes C, then each score column times its key's K scale.
//   For P V, each probability times its key's V scale feeds the A fragment (the row sum takes
//   the probabilities alone). So that fp16 holds those products whatever the scales, the
//   outputs are kept in units of a reference V scale R (RowState::v_unit): the first such
//   chunk's largest V scale (at least 2^-14), every chunk's probabilities divided by it, the
//   outputs multiplied by it when written. A product past 65504 R saturates.
// - int4: the codes become fp16 values code * scale + min (one rounding) and run as bf16
//   values would.
// Lane (g, c) holds the S columns (keys) 2c, 2c + 1, 2c + 8, 2c + 9, exactly the keys whose V
// rows it loads, so it loads those keys' K and V scales itself.
//
// Its K operand takes its own k order, with Q converted to fp16 once per warp in the same
// order: lane (g, c) loads 16 contiguous elements per 64 (elements 64 p + 16 c .. + 15 of key g
// and 8 + g), in two pieces of 8; piece elements i and i + 4 share a fp16 pair, pairs 0, 1 make
// one k-step and pairs 2, 3 the next. V keeps the bf16 layout (dims 64 h + 8 g .. + 7 of keys
// 2c, 2c + 1, 2c + 8, 2c + 9), so bf16 and quantized chunks of one row share the outputs.
//
// Q in fp16: values past +-65504 are clamped to it (no model's queries come near; a bf16 value
// that large would turn to infinity and every score to NaN).
#pragma once

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kv_quant.cuh"
#include "backend/cuda/paged_attention.h"

namespace optimate::cuda {

constexpr unsigned kTcFull = 0xffffffffu;
constexpr int kTcChunk = 16;

template <int D>
struct Chunk {
  // bf16 values; or codes and scales in the same registers (load_quant_chunk).
  uint4 k[2][D / 32];  // keys g and 8 + g, dims 32 s + 8 c .. + 7
  uint4 v[4][D / 64];  // keys 2c, 2c + 1, 2c + 8, 2c + 9, dims 64 h + 8 g .. + 7
  int code;            // Q variant: the block's precision
};

struct RowState {
  float m = -INFINITY;  // running max of row g, base-2 units
  float l = 0.0f;       // this lane's share of the row sum
  float v_unit = 1.0f;  // the outputs' unit (only a quantized chunk changes it, once)
  float v_inv = 1.0f;   // 1 / v_unit: what probabilities are multiplied by
  bool v_fixed = false;
};

__device__ __forceinline__ uint32_t tc_word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// d[0..1] += A B for rows g (rows g + 8 of A are zero; their results land in scratch
// registers and are dropped, so they hold no accumulator). BF16: bf16 operands, else fp16.
template <bool BF16>
__device__ __forceinline__ void mma_rows_lo(float (&d)[2], uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
#define OPTIMATE_MMA_ROWS_LO(TYPE)                                                                         \
  asm volatile("{\n.reg .f32 r2, r3;\n"                                                                    \
               "mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE ".f32 {%0,%1,r2,r3}, {%2,%3,%4,%3}, " \
               "{%5,%6}, {%0,%1,%7,%7};\n}\n"                                                              \
               : "+f"(d[0]), "+f"(d[1])                                                                    \
               : "r"(a0), "r"(0u), "r"(a2), "r"(b0), "r"(b1), "f"(0.0f))
  if constexpr (BF16) OPTIMATE_MMA_ROWS_LO("bf16");
  else OPTIMATE_MMA_ROWS_LO("f16");
#undef OPTIMATE_MMA_ROWS_LO
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Scores s[nt][e] of keys c0 + nt * 8 + 2c + e (raw dot products, times col_scale[nt][e] in
// base-2 units; keys at or past `end` masked) become probabilities against the new running max;
// the outputs are rescaled when it moved, and the row sum takes the probabilities.
template <int D>
__device__ __forceinline__ void online_softmax(float (&s)[2][2], const float (&col_scale)[2][2], float (&o)[D / 8][2],
                                               RowState& st, int c0, int end, int c) {
  float mx = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int key = c0 + nt * 8 + 2 * c + e;
      s[nt][e] = key < end ? s[nt][e] * col_scale[nt][e] : -INFINITY;
      mx = fmaxf(mx, s[nt][e]);
    }
  }
  mx = group_max<4>(mx);
  const float m_new = fmaxf(st.m, mx);  // finite: every chunk has a key before `end`
  if (__any_sync(kTcFull, m_new > st.m)) {
    const float alpha = exp2f(st.m - m_new);
    st.l *= alpha;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      o[j][0] *= alpha;
      o[j][1] *= alpha;
    }
  }
  st.m = m_new;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    s[nt][0] = exp2f(s[nt][0] - m_new);
    s[nt][1] = exp2f(s[nt][1] - m_new);
    st.l += s[nt][0] + s[nt][1];
  }
}

// Q of head g in the quantized chunks' fp16 k order: q16[ks][lane] holds lane's A registers
// of k-step ks. Shared memory, not registers: the bf16 chunks' operands leave none to spare.
template <int D>
__device__ __forceinline__ void store_q_f16(uint2 (*q16)[32], const __nv_bfloat16* q_head, bool valid, int lane) {
  const int c = lane % 4;
#pragma unroll
  for (int piece = 0; piece < D / 32; ++piece) {
    float x[8];
    if (valid) load_bf16x8(q_head + 64 * (piece / 2) + 16 * c + 8 * (piece % 2), x);
    else
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = fminf(fmaxf(x[i], -65504.0f), 65504.0f);
    q16[2 * piece][lane] = make_uint2(pack_half2(x[0], x[4]), pack_half2(x[1], x[5]));
    q16[2 * piece + 1][lane] = make_uint2(pack_half2(x[2], x[6]), pack_half2(x[3], x[7]));
  }
  __syncwarp();
}

// Loads a quantized chunk (code fp8, int8 or int4) into ch's registers:
//   fp8 / int8  k[nt][p] = the 16 codes 64 p + 16 c .. + 15 of key nt * 8 + g;
//               v[i][h].xy = codes 64 h + 8 g .. + 7 of key i (2c, 2c + 1, 2c + 8, 2c + 9);
//               v[i][0].z, .w = key i's V and K scales
//   int4        k[nt][p] = codes 64 p + 16 c .. + 15 (x, y) and the group's (scale, min) (z);
//               v[i][h] = codes 64 h + 8 g .. + 7 (x) and group h's (scale, min) (y)
// Codes of keys past `last` (relative to the chunk) repeat key `last`; scales are loaded for
// the chunk's own keys (inside the block, maybe never written) and masked by the compute.
template <int D>
__device__ __forceinline__ void load_quant_chunk(Chunk<D>& ch, int code, const uint8_t* kb, const uint8_t* vb,
                                                 int hkv, int bs, int kvh, int tok0, int last, int g, int c) {
  auto codes = [&](int t) { return kv_codes_offset(code, bs, D, kvh, tok0 + min(t, last)); };
  auto scales = [&](int t) { return kv_scales_offset(code, hkv, bs, D, kvh, tok0 + min(t, last)); };
  const int keys[4] = {2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9};
  if (code == kKvInt4) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int p = 0; p < D / 64; ++p) {
        const uint2 w = *reinterpret_cast<const uint2*>(kb + codes(nt * 8 + g) + 32 * p + 8 * c);
        ch.k[nt][p] = make_uint4(w.x, w.y, *reinterpret_cast<const uint32_t*>(kb + scales(nt * 8 + g) + 4 * p), 0u);
      }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int h = 0; h < D / 64; ++h)
        ch.v[i][h] = make_uint4(*reinterpret_cast<const uint32_t*>(vb + codes(keys[i]) + 32 * h + 4 * g),
                                *reinterpret_cast<const uint32_t*>(vb + scales(keys[i]) + 4 * h), 0u, 0u);
    return;
  }
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int p = 0; p < D / 64; ++p)
      ch.k[nt][p] = *reinterpret_cast<const uint4*>(kb + codes(nt * 8 + g) + 64 * p + 16 * c);
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int h = 0; h < D / 64; ++h) {
      const uint2 w = *reinterpret_cast<const uint2*>(vb + codes(keys[i]) + 64 * h + 8 * g);
      ch.v[i][h].x = w.x;
      ch.v[i][h].y = w.y;
    }
  // Keys 2c, 2c + 1 and 2c + 8, 2c + 9 are adjacent rows: one 8-byte load per pair (the block
  // size is a multiple of 16 and the chunk starts at a multiple of 16 inside it).
  const int64_t first = kv_scales_offset(code, hkv, bs, D, kvh, tok0);
#pragma unroll
  for (int pair = 0; pair < 2; ++pair) {
    const float2 vs = *reinterpret_cast<const float2*>(vb + first + 4 * keys[2 * pair]);
    const float2 ks = *reinterpret_cast<const float2*>(kb + first + 4 * keys[2 * pair]);
    ch.v[2 * pair][0].z = __float_as_uint(vs.x);
    ch.v[2 * pair + 1][0].z = __float_as_uint(vs.y);
    ch.v[2 * pair][0].w = __float_as_uint(ks.x);
    ch.v[2 * pair + 1][0].w = __float_as_uint(ks.y);
  }
}

// One quantized chunk (CODE fp8, int8 or int4): the fp16 twin of paged_attention_tc.cu's
// compute_keys.
template <int D, int CODE>
__device__ __forceinline__ void compute_quant_keys(const Chunk<D>& ch, const uint2 (*q16)[32], float (&o)[D / 8][2],
                                                   RowState& st, int c0, int end, float scale_log2, int lane) {
  constexpr bool kScaled = CODE != kKvInt4;
  const int c = lane % 4;
  float s[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
#pragma unroll
  for (int p = 0; p < D / 64; ++p) {
#pragma unroll
    for (int piece = 0; piece < 2; ++piece) {
      const int ks = 4 * p + 2 * piece;
      const uint2 qa = q16[ks][lane], qb = q16[ks + 1][lane];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const uint4& w = ch.k[nt][p];
        uint32_t r[4];
        if constexpr (kScaled) kv_codes_to_half2x4<CODE>(tc_word(w, 2 * piece), tc_word(w, 2 * piece + 1), r);
        else kv_int4_to_half2x4(tc_word(w, piece), __byte_perm(w.z, 0u, 0x1010u), __byte_perm(w.z, 0u, 0x3232u), r);
        mma_rows_lo<false>(s[nt], qa.x, qa.y, r[0], r[1]);
        mma_rows_lo<false>(s[nt], qb.x, qb.y, r[2], r[3]);
      }
    }
  }
  float col_scale[2][2];
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e)
      col_scale[nt][e] = kScaled ? __uint_as_float(ch.v[2 * nt + e][0].w) * scale_log2 : scale_log2;
  online_softmax<D>(s, col_scale, o, st, c0, end, c);

  // A fragment: keys 2c, 2c + 1 (a0) and 2c + 8, 2c + 9 (a2) = s[0][*], s[1][*].
  if constexpr (kScaled) {
    float vs[2][2], most = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        // Keys at or past `end` have probability 0 and a scale that may never have been written.
        vs[nt][e] = c0 + nt * 8 + 2 * c + e < end ? __uint_as_float(ch.v[2 * nt + e][0].z) : 0.0f;
        most = fmaxf(most, vs[nt][e]);
      }
    if (!st.v_fixed) {  // warp-uniform
      most = group_max<4>(most);  // the chunk's 16 keys
      if (most > 0.0f) {
        st.v_fixed = true;
        st.v_unit = fmaxf(most, 0x1p-14f);
        st.v_inv = 1.0f / st.v_unit;
#pragma unroll
        for (int j = 0; j < D / 8; ++j) o[j][0] *= st.v_inv, o[j][1] *= st.v_inv;
      }
    }
    auto a = [&](int nt, int e) { return fminf(s[nt][e] * vs[nt][e] * st.v_inv, 65504.0f); };
    const uint32_t a0 = pack_half2(a(0, 0), a(0, 1));
    const uint32_t a2 = pack_half2(a(1, 0), a(1, 1));
#pragma unroll
    for (int h = 0; h < D / 64; ++h) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // dims 8 g + 4 half .. + 3 of tile h
        uint32_t b0[4], b1[4];  // keys (2c, 2c + 1) and (2c + 8, 2c + 9)
        kv_codes_to_half2x4<CODE>(tc_word(ch.v[0][h], half), tc_word(ch.v[1][h], half), b0);
        kv_codes_to_half2x4<CODE>(tc_word(ch.v[2][h], half), tc_word(ch.v[3][h], half), b1);
#pragma unroll
        for (int i = 0; i < 4; ++i) mma_rows_lo<false>(o[8 * h + 4 * half + i], a0, a2, b0[i], b1[i]);
      }
    }
  } else {
    const uint32_t a0 = pack_half2(s[0][0] * st.v_inv, s[0][1] * st.v_inv);
    const uint32_t a2 = pack_half2(s[1][0] * st.v_inv, s[1][1] * st.v_inv);
#pragma unroll
    for (int h = 0; h < D / 64; ++h) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // dims 8 g + 4 half .. + 3 of tile h
        uint32_t b[2][4];  // keys (2c, 2c + 1) and (2c + 8, 2c + 9)
#pragma unroll
        for (int kp = 0; kp < 2; ++kp) {
          const uint4& x0 = ch.v[2 * kp][h];
          const uint4& x1 = ch.v[2 * kp + 1][h];
          kv_int4_to_half2x4(__byte_perm(x0.x, x1.x, half ? 0x7632u : 0x5410u), __byte_perm(x0.y, x1.y, 0x5410u),
                             __byte_perm(x0.y, x1.y, 0x7632u), b[kp]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) mma_rows_lo<false>(o[8 * h + 4 * half + i], a0, a2, b[0][i], b[1][i]);
      }
    }
  }
}

}  // namespace optimate::cuda
