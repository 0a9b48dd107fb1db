// One warp of the tensor-core decode kernels (paged_attention_tc.cu, paged_attention_heads.cu)
// walking a range of one row's keys in chunks of 16: the block table window, the loads of a
// chunk (bf16, or any precision in a cache that may hold quantized blocks), a bf16 chunk's
// mma, and the loop that keeps chunks in flight while one is computed. The register layouts
// are described in paged_attention_tc.cu, the quantized chunks in paged_attention_tc_quant.cuh.
#pragma once

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/paged_attention_tc_quant.cuh"

namespace optimate::cuda {

// The cache's block ids for 32 consecutive blocks of the sequence, one per lane, refreshed as
// the keys move on (a warp-uniform branch).
struct TableWindow {
  const int32_t* table;
  int64_t max_blocks;
  int first = -1 << 30;
  int32_t ids = 0;

  __device__ int32_t block_of(int block, int lane) {
    if (block - first >= 32) {
      first = block;
      ids = first + lane < max_blocks ? table[first + lane] : 0;
    }
    return __shfl_sync(kTcFull, ids, block - first);
  }
};

// Issues the loads of the 16 keys at c0 (a multiple of 16 inside one cache block); keys at or
// past `end` read key end - 1 instead and are masked later. U: every block's precision code
// when the cache promises one (KvArena::uniform_code), else -1.
template <int D, bool Q, int U>
__device__ __forceinline__ void load_chunk(Chunk<D>& ch, const PagedAttentionParams& p,
                                           TableWindow& tw, int c0, int end, int kvh, int g, int c,
                                           int lane) {
  const int bs = static_cast<int>(p.block_size);
  const int block = c0 / bs;
  const int32_t id = tw.block_of(block, lane);
  if constexpr (!Q) {
    const int64_t base = (static_cast<int64_t>(id) * p.num_kv_heads + kvh) * bs + (c0 - block * bs);
    const int last = end - 1 - c0;  // keys past it repeat it
    auto row = [&](int t) { return base + min(t, last); };
    const auto* k_cache = reinterpret_cast<const __nv_bfloat16*>(p.cache.k);
    const auto* v_cache = reinterpret_cast<const __nv_bfloat16*>(p.cache.v);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const __nv_bfloat16* src = k_cache + row(nt * 8 + g) * D + 8 * c;
#pragma unroll
      for (int s = 0; s < D / 32; ++s) ch.k[nt][s] = load_16_bytes(src + 32 * s);
    }
    const int keys[4] = {2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __nv_bfloat16* src = v_cache + row(keys[i]) * D + 8 * g;
#pragma unroll
      for (int h = 0; h < D / 64; ++h) ch.v[i][h] = load_16_bytes(src + 64 * h);
    }
  } else {
    const int code = U >= 0 ? U : kv_entry_code(id);  // warp-uniform: one block's keys
    ch.code = code;
    const int64_t block_offset = static_cast<int64_t>(kv_entry_slot(id)) * p.cache.slot_bytes;
    const uint8_t* kb = p.cache.k + block_offset;
    const uint8_t* vb = p.cache.v + block_offset;
    const int hkv = static_cast<int>(p.num_kv_heads), tok0 = c0 - block * bs;
    const int last = end - 1 - c0;  // keys past it repeat it
    if (U >= 0 || code != kKvBf16) {
      load_quant_chunk<D>(ch, code, kb, vb, hkv, bs, kvh, tok0, last, g, c);
      return;
    }
    auto row = [&](int t) { return kv_codes_offset(kKvBf16, bs, D, kvh, tok0 + min(t, last)); };
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int s = 0; s < D / 32; ++s) ch.k[nt][s] = *reinterpret_cast<const uint4*>(kb + row(nt * 8 + g) + 64 * s + 16 * c);
    const int keys[4] = {2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9};
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int h = 0; h < D / 64; ++h) ch.v[i][h] = *reinterpret_cast<const uint4*>(vb + row(keys[i]) + 128 * h + 16 * g);
  }
}

// Q's bf16 fragments (dims 32 s + 8 c .. + 7 of head g): in registers (bf16-only variant), or
// in shared memory, read at each use (Q variant: its quantized chunks' operands leave no
// registers for them).
template <int D>
struct RegisterQ {
  const uint4 (&q)[D / 32];
  __device__ __forceinline__ uint4 operator()(int s) const { return q[s]; }
};

template <int D>
struct SharedQ {
  const uint4 (*q)[32];
  int lane;
  __device__ __forceinline__ uint4 operator()(int s) const {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(&q[s][lane]))));
    return v;
  }
};

// A bf16 chunk.
template <int D, typename QFragments>
__device__ __forceinline__ void compute_keys(const Chunk<D>& ch, const QFragments& q, float (&o)[D / 8][2],
                                             RowState& st, int c0, int end, float scale_log2, int c) {
  float s[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
#pragma unroll
  for (int ks = 0; ks < D / 32; ++ks) {
    const uint4 qf = q(ks);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const uint4 kf = ch.k[nt][ks];
      mma_rows_lo<true>(s[nt], qf.x, qf.y, kf.x, kf.y);
      mma_rows_lo<true>(s[nt], qf.z, qf.w, kf.z, kf.w);
    }
  }
  const float col_scale[2][2] = {{scale_log2, scale_log2}, {scale_log2, scale_log2}};
  online_softmax<D>(s, col_scale, o, st, c0, end, c);
  // Keys 2c, 2c + 1 and 2c + 8, 2c + 9, in the outputs' unit (1 but after a quantized chunk).
  const uint32_t a0 = pack_bf16(s[0][0] * st.v_inv, s[0][1] * st.v_inv);
  const uint32_t a2 = pack_bf16(s[1][0] * st.v_inv, s[1][1] * st.v_inv);
#pragma unroll
  for (int h = 0; h < D / 64; ++h) {
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
      const int j = 8 * h + jj, w = jj / 2;
      const uint32_t sel = (jj % 2) ? 0x7632u : 0x5410u;  // high or low bf16 of each key's word
      const uint32_t b0 = __byte_perm(tc_word(ch.v[0][h], w), tc_word(ch.v[1][h], w), sel);
      const uint32_t b1 = __byte_perm(tc_word(ch.v[2][h], w), tc_word(ch.v[3][h], w), sel);
      mma_rows_lo<true>(o[j], a0, a2, b0, b1);
    }
  }
}

template <int D, bool Q, int U>
__device__ __forceinline__ void compute_chunk(const Chunk<D>& ch, const uint4 (&q)[D / 32], const uint4 (*q_shared)[32],
                                              const uint2 (*q16)[32],
                                              float (&o)[D / 8][2], RowState& st, int c0, int end,
                                              float scale_log2, int lane) {
  const int c = lane % 4;
  if constexpr (U >= 0) {
    compute_quant_keys<D, U>(ch, q16, o, st, c0, end, scale_log2, lane);
  } else if constexpr (Q) {
    switch (ch.code) {
      case kKvFp8: compute_quant_keys<D, kKvFp8>(ch, q16, o, st, c0, end, scale_log2, lane); return;
      case kKvInt8: compute_quant_keys<D, kKvInt8>(ch, q16, o, st, c0, end, scale_log2, lane); return;
      case kKvInt4: compute_quant_keys<D, kKvInt4>(ch, q16, o, st, c0, end, scale_log2, lane); return;
      default: compute_keys<D>(ch, SharedQ<D>{q_shared, lane}, o, st, c0, end, scale_log2, c); return;
    }
  } else {
    compute_keys<D>(ch, RegisterQ<D>{q}, o, st, c0, end, scale_log2, c);
  }
}

// Keys [begin, end) of the row through the warp's running state (o, st): DEPTH chunks rotate
// through buf, DEPTH - 1 in flight while one is computed; buf[0] holds the chunk at `begin`
// (start_keys).
template <int D, bool Q, int U, int DEPTH>
__device__ __forceinline__ void attend_keys(Chunk<D> (&buf)[DEPTH], const PagedAttentionParams& p,
                                            TableWindow& tw, int begin, int end, int kvh, const uint4 (&q)[D / 32],
                                            const uint4 (*q_shared)[32], const uint2 (*q16)[32],
                                            float (&o)[D / 8][2], RowState& st, float scale_log2, int lane) {
  const int g = lane / 4, c = lane % 4;
  if constexpr (DEPTH == 2) {
    for (int c0 = begin; c0 < end; c0 += 2 * kTcChunk) {
      const bool second = c0 + kTcChunk < end;
      if (second) load_chunk<D, Q, U>(buf[1], p, tw, c0 + kTcChunk, end, kvh, g, c, lane);
      compute_chunk<D, Q, U>(buf[0], q, q_shared, q16, o, st, c0, end, scale_log2, lane);
      if (c0 + 2 * kTcChunk < end) load_chunk<D, Q, U>(buf[0], p, tw, c0 + 2 * kTcChunk, end, kvh, g, c, lane);
      if (second) compute_chunk<D, Q, U>(buf[1], q, q_shared, q16, o, st, c0 + kTcChunk, end, scale_log2, lane);
    }
  } else {
#pragma unroll
    for (int i = 1; i + 1 < DEPTH; ++i)
      if (begin + i * kTcChunk < end) load_chunk<D, Q, U>(buf[i], p, tw, begin + i * kTcChunk, end, kvh, g, c, lane);
    for (int c0 = begin; c0 < end; c0 += DEPTH * kTcChunk) {
#pragma unroll
      for (int i = 0; i < DEPTH; ++i) {
        const int at = c0 + i * kTcChunk;
        if (at >= end) break;  // warp-uniform
        const int ahead = at + (DEPTH - 1) * kTcChunk;
        if (ahead < end) load_chunk<D, Q, U>(buf[(i + DEPTH - 1) % DEPTH], p, tw, ahead, end, kvh, g, c, lane);
        compute_chunk<D, Q, U>(buf[i], q, q_shared, q16, o, st, at, end, scale_log2, lane);
      }
    }
  }
}

}  // namespace optimate::cuda
