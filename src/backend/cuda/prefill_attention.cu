// Flash-attention-style causal prefill over the paged KV cache, on bf16 tensor cores
// (mma.sync m16n8k16, fp32 accumulate), FlashAttention-2 style: every intermediate lives in
// registers.
//
// One block computes one (query head, tile of 128 query rows); its four warps own 32 rows
// each, as two 16-row m-tiles, so every K or V fragment taken from shared memory feeds two
// MMAs. The Q tile is copied into shared memory once; K and V tiles of 64 keys stream in
// through cp.async, two stages deep, so the next tile's gather from the cache's pages overlaps
// this tile's arithmetic. Each warp computes S = Q K^T for its rows (Q's fragments by ldmatrix,
// K's by ldmatrix), applies the causal mask and an online softmax (a row's values sit in the
// four lanes of a quad), turns P into the A operand of the next product without leaving
// registers, and adds P V (V's fragments by ldmatrix.trans from the row-major tile). A warp
// whose rows all precede a key tile skips it.
//
// Fragment layout of mma.m16n8k16 (g = lane / 4, c = lane % 4): A holds rows g and g + 8,
// columns 2c, 2c + 1 and 2c + 8, 2c + 9; B holds k rows 2c, 2c + 1, 2c + 8, 2c + 9 of column
// g; C holds rows g and g + 8, columns 2c and 2c + 1.
//
// A cache that may hold quantized blocks takes the Q variant: cp.async copies each key row's
// codes (bf16, fp8, int8 or int4: its block's precision) and scales into a raw stage while the
// warps compute on the single bf16 stage; after the tile, the block turns the raw stage into the
// bf16 stage (kv_quant.cuh) and computes on. Same shared memory as the bf16 kernel's two stages.
//
// Layouts: q/out rows [num_heads, head_dim] bf16 at a row stride; cache blocks per kv_block.h;
// tiles [num_tiles, 4] int32 (see the header).
// Launch: grid (num_heads, num_tiles), 128 threads, dynamic shared memory (the Q tile and two
// K/V stages of 64 keys, or one and the raw stage; two blocks fit an H200 SM; key tiles of 32
// where a block gets less: prefill_attention_key_tile). Blocks take the tiles last to first: with one long prompt
// the late tiles carry the most keys, and starting them first shortens the tail.
#include "backend/cuda/prefill_attention.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/per_device.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernel_paths.h"
#include "backend/cuda/kv_quant.cuh"

namespace optimate::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMTiles = 2;  // 16-row m-tiles per warp
constexpr int kWarpRows = 16 * kMTiles;
static_assert(kPrefillTileRows == kWarpRows * kWarps, "the warps' rows make up the tile");

// BK: keys a step takes (prefill_attention_key_tile).
template <int D, bool Q, int BK>
struct Smem {
  static constexpr int kLd = D + 8;  // bf16; the pad puts the 8 rows of an ldmatrix on all banks
  static constexpr size_t kTile = sizeof(__nv_bfloat16) * BK * kLd;
  static constexpr size_t kQ = sizeof(__nv_bfloat16) * kPrefillTileRows * kLd;
  static constexpr int kStages = Q ? 1 : 2;
  // Q variant's raw stage: K codes [BK][2 D] bytes (room for a bf16 row), V codes, then K and
  // V scales [BK][8] bytes (the most a row has: two int4 groups at head_dim 128).
  static constexpr size_t kRawRow = 2 * D, kRawScales = 8;
  static constexpr size_t kRaw = Q ? 2 * BK * (kRawRow + kRawScales) : 0;
  static constexpr size_t kBytes = kQ + kStages * 2 * kTile + kRaw;  // Q, {K, V} stages, raw
  static_assert(kBytes == prefill_attention_smem_bytes(D, Q, BK), "the header's count of the same bytes");
};

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 bf16 matrices; lane i gives the address of row i % 8 of matrix i / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const __nv_bfloat16* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}

// 16 bytes global -> shared, bypassing L1; zero-filled when !valid.
__device__ __forceinline__ void cp_async16(__nv_bfloat16* dst, const __nv_bfloat16* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async16_bytes(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}

__device__ __forceinline__ void cp_async4_bytes(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst)), "l"(src));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Issues the copies of the BK keys from kt into one stage: lanes take consecutive 16-byte
// pieces of a row, so each warp instruction moves two whole cache rows.
template <int D, int BK>
__device__ __forceinline__ void load_tile(const PrefillAttentionParams& p, const int32_t* table,
                                          int kvh, int kt, int kv_end, __nv_bfloat16* sK,
                                          __nv_bfloat16* sV) {
  constexpr int kPieces = D / 8;                     // 16-byte pieces per row
  constexpr int kRowsPerPass = kThreads / kPieces;  // rows one pass of the block covers
  const int bs = static_cast<int>(p.block_size);
  const int piece = threadIdx.x % kPieces;
  const auto* k_cache = reinterpret_cast<const __nv_bfloat16*>(p.cache.k);
  const auto* v_cache = reinterpret_cast<const __nv_bfloat16*>(p.cache.v);
#pragma unroll
  for (int j = threadIdx.x / kPieces; j < BK; j += kRowsPerPass) {
    const int pos = kt + j;
    const bool valid = pos < kv_end;
    const int64_t row = valid ? (static_cast<int64_t>(table[pos / bs]) * p.num_kv_heads + kvh) * bs + pos % bs : 0;
    cp_async16(sK + j * Smem<D, false, BK>::kLd + piece * 8, k_cache + row * D + piece * 8, valid);
    cp_async16(sV + j * Smem<D, false, BK>::kLd + piece * 8, v_cache + row * D + piece * 8, valid);
  }
}

// Q variant: issues the copies of the codes and scales of the BK key rows from kt, at their
// blocks' precisions, into the raw stage (rows past kv_end are not copied).
template <int D, int BK>
__device__ __forceinline__ void load_raw_tile(const PrefillAttentionParams& p, const int32_t* table,
                                              int kvh, int kt, int kv_end, uint8_t* raw) {
  using S = Smem<D, true, BK>;
  constexpr int kPieces = D / 8;  // 16-byte pieces of a bf16 row
  constexpr int kRowsPerPass = kThreads / kPieces;
  const int bs = static_cast<int>(p.block_size), hkv = static_cast<int>(p.num_kv_heads);
  const int piece = threadIdx.x % kPieces;
#pragma unroll
  for (int j = threadIdx.x / kPieces; j < BK; j += kRowsPerPass) {
    const int pos = kt + j;
    if (pos >= kv_end) continue;
    const int32_t entry = table[pos / bs];
    const int code = kv_entry_code(entry), tok = pos % bs;
    const int64_t block = static_cast<int64_t>(kv_entry_slot(entry)) * p.cache.slot_bytes;
    if (piece < kv_row_bytes(code, D) / 16) {
      const int64_t at = block + kv_codes_offset(code, bs, D, kvh, tok) + 16 * piece;
      cp_async16_bytes(raw + j * S::kRawRow + 16 * piece, p.cache.k + at);
      cp_async16_bytes(raw + (BK + j) * S::kRawRow + 16 * piece, p.cache.v + at);
    }
    if (piece < kv_scale_bytes(code, D) / 4) {
      const int64_t at = block + kv_scales_offset(code, hkv, bs, D, kvh, tok) + 4 * piece;
      uint8_t* scales = raw + 2 * BK * S::kRawRow;
      cp_async4_bytes(scales + j * S::kRawScales + 4 * piece, p.cache.k + at);
      cp_async4_bytes(scales + (BK + j) * S::kRawScales + 4 * piece, p.cache.v + at);
    }
  }
}

// Q variant: the raw stage (landed) into the bf16 stage; rows past kv_end become zeros.
template <int D, int BK>
__device__ __forceinline__ void convert_raw_tile(const PrefillAttentionParams& p, const int32_t* table,
                                                 int kt, int kv_end, const uint8_t* raw, __nv_bfloat16* sK,
                                                 __nv_bfloat16* sV) {
  using S = Smem<D, true, BK>;
  constexpr int kPieces = D / 8;
  constexpr int kRowsPerPass = kThreads / kPieces;
  const int bs = static_cast<int>(p.block_size);
  const int piece = threadIdx.x % kPieces;
  const uint8_t* scales = raw + 2 * BK * S::kRawRow;
#pragma unroll
  for (int j = threadIdx.x / kPieces; j < BK; j += kRowsPerPass) {
    const int pos = kt + j;
    uint4 k = {0, 0, 0, 0}, v = {0, 0, 0, 0};
    if (pos < kv_end) {
      const int code = kv_entry_code(table[pos / bs]);
      k = kv_dequant8_bf16(code, kv_load8(code, raw + j * S::kRawRow, scales + j * S::kRawScales, piece));
      v = kv_dequant8_bf16(code, kv_load8(code, raw + (BK + j) * S::kRawRow, scales + (BK + j) * S::kRawScales, piece));
    }
    *reinterpret_cast<uint4*>(sK + j * S::kLd + piece * 8) = k;
    *reinterpret_cast<uint4*>(sV + j * S::kLd + piece * 8) = v;
  }
}

// The tile's query rows of head h into shared memory; rows past nq read as zero.
template <int D>
__device__ __forceinline__ void load_q(const PrefillAttentionParams& p, int64_t tok0, int nq, int h,
                                       __nv_bfloat16* sQ) {
  constexpr int kPieces = D / 8;
  const int piece = threadIdx.x % kPieces;
#pragma unroll
  for (int j = threadIdx.x / kPieces; j < kPrefillTileRows; j += kThreads / kPieces) {
    const bool valid = j < nq;
    const __nv_bfloat16* src = p.q + (valid ? (tok0 + j) * p.q_row_stride + h * D : 0) + piece * 8;
    cp_async16(sQ + j * Smem<D, false, 64>::kLd + piece * 8, src, valid);
  }
}

// Causal mask and online softmax of one m-tile's scores s (16 rows by the BK keys from kt);
// leaves P in pf as the A operand of P V and rescales the m-tile's output o. A row's BK values
// are spread over the lanes of a quad; qpos0 / qpos1 are the positions of rows g and g + 8.
template <int ND, int BK>
__device__ __forceinline__ void online_softmax(float (&s)[BK / 8][4], float (&o)[ND][4],
                                               uint32_t (&pf)[BK / 16][4], float (&m)[2],
                                               float (&l)[2], bool masked, int kt, int qpos0,
                                               int qpos1, int c, float scale_log2) {
  constexpr int NK = BK / 8;
  float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
  for (int n = 0; n < NK; ++n) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int kpos = kt + n * 8 + 2 * c + e;
      s[n][e] = !masked || kpos <= qpos0 ? s[n][e] * scale_log2 : -INFINITY;
      s[n][2 + e] = !masked || kpos <= qpos1 ? s[n][2 + e] * scale_log2 : -INFINITY;
      mx0 = fmaxf(mx0, s[n][e]);
      mx1 = fmaxf(mx1, s[n][2 + e]);
    }
  }
  mx0 = group_max<4>(mx0);
  mx1 = group_max<4>(mx1);
  const float mn0 = fmaxf(m[0], mx0), mn1 = fmaxf(m[1], mx1);
  const float base0 = mn0 == -INFINITY ? 0.0f : mn0;  // fully masked rows so far
  const float base1 = mn1 == -INFINITY ? 0.0f : mn1;
  const float alpha0 = exp2f(m[0] - base0), alpha1 = exp2f(m[1] - base1);
  m[0] = mn0;
  m[1] = mn1;
  float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
  for (int n = 0; n < NK; ++n) {
    const float p0 = exp2f(s[n][0] - base0), p1 = exp2f(s[n][1] - base0);
    const float p2 = exp2f(s[n][2] - base1), p3 = exp2f(s[n][3] - base1);
    sum0 += p0 + p1;
    sum1 += p2 + p3;
    pf[n / 2][(n % 2) * 2 + 0] = pack_bf16(p0, p1);
    pf[n / 2][(n % 2) * 2 + 1] = pack_bf16(p2, p3);
  }
  l[0] = l[0] * alpha0 + sum0;  // per-lane share of the row sum; the quad adds up at the end
  l[1] = l[1] * alpha1 + sum1;
#pragma unroll
  for (int n = 0; n < ND; ++n) {
    o[n][0] *= alpha0;
    o[n][1] *= alpha0;
    o[n][2] *= alpha1;
    o[n][3] *= alpha1;
  }
}

template <int D, bool Q, int BK>
__global__ void __launch_bounds__(kThreads, 2) prefill_attention_kernel(const PrefillAttentionParams p) {
  using S = Smem<D, Q, BK>;
  constexpr int KD = D / 16;   // k-steps over head_dim
  constexpr int ND = D / 8;    // 8-wide column tiles of the output
  constexpr int NK = BK / 8;   // 8-wide column tiles of S
  constexpr int MT = kMTiles;
  extern __shared__ __align__(128) unsigned char smem[];
  auto* sQ = reinterpret_cast<__nv_bfloat16*>(smem);
  auto* stage_base = reinterpret_cast<__nv_bfloat16*>(smem + S::kQ);
  auto sK = [&](int st) { return stage_base + (2 * st) * (S::kTile / 2); };
  auto sV = [&](int st) { return stage_base + (2 * st + 1) * (S::kTile / 2); };
  uint8_t* raw = smem + S::kQ + S::kStages * 2 * S::kTile;  // Q variant only

  const int h = blockIdx.x;
  const int* tile = p.tiles + 4 * (p.num_tiles - 1 - blockIdx.y);
  const int64_t tok0 = tile[0];
  const int nq = tile[1];
  const int pos0 = tile[2];
  const int32_t* table = p.block_tables + tile[3] * p.max_blocks_per_seq;
  const int kvh = h / static_cast<int>(p.num_heads / p.num_kv_heads);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int kv_end = pos0 + nq;  // keys [0, kv_end)
  const int num_kt = (kv_end + BK - 1) / BK;
  // Read once here: left in the epilogue, they were re-read through the parameter block for
  // every store.
  __nv_bfloat16* const out = p.out;
  const int64_t out_stride = p.out_row_stride;

  load_q<D>(p, tok0, nq, h, sQ);
  if constexpr (Q) {
    load_raw_tile<D, BK>(p, table, kvh, 0, kv_end, raw);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    convert_raw_tile<D, BK>(p, table, 0, kv_end, raw, sK(0), sV(0));
  } else {
    load_tile<D, BK>(p, table, kvh, 0, kv_end, sK(0), sV(0));
    cp_async_commit();
  }

  // This warp's rows within the tile: m-tile mt holds rows w0 + 16 mt + {g, g + 8}.
  const int w0 = warp * kWarpRows;
  const bool has_rows = w0 < nq;  // warps wholly past the last row have nothing to compute
  float o[MT][ND][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int n = 0; n < ND; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
  const float scale_log2 = p.scale * 1.4426950408889634f;  // exp(x) = exp2(x * log2 e)
  // ldmatrix row addresses of this lane within a tile: matrix i / 8, row i % 8.
  const int lm = lane / 8, lr = lane % 8;

  // The key tile at kt, from the stage tK / tV, into this warp's rows.
  auto attend = [&](const __nv_bfloat16* tK, const __nv_bfloat16* tV, int kt) {
    // A key tile that starts after this warp's last row is masked out whole.
    if (!has_rows || kt > pos0 + w0 + kWarpRows - 1) return;
    // S = Q K^T: the warp's two m-tiles by the tile's 64 keys. Per pair of k-steps, one
    // ldmatrix.x4 per m-tile and k-step gives Q's A fragment; one ldmatrix.x4 per 8 keys gives
    // K's B fragments of both k-steps (matrices: dims +0, +8, +16, +24), used by both m-tiles.
    float s[MT][NK][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int n = 0; n < NK; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
    for (int k = 0; k < KD; k += 2) {
      uint32_t qa[MT][2][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < 2; ++j)
          ldmatrix_x4(qa[mt][j], sQ + (w0 + 16 * mt + (lm % 2) * 8 + lr) * S::kLd + (k + j) * 16 + (lm / 2) * 8);
#pragma unroll
      for (int n = 0; n < NK; ++n) {
        uint32_t b[4];
        ldmatrix_x4(b, tK + (n * 8 + lr) * S::kLd + k * 16 + lm * 8);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(s[mt][n], qa[mt][0], b[0], b[1]);
          mma_bf16(s[mt][n], qa[mt][1], b[2], b[3]);
        }
      }
    }
    uint32_t pf[MT][BK / 16][4];  // P as the A operand of P V, one k-step per 16 keys
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int first = pos0 + w0 + 16 * mt;  // position of the m-tile's first row
      online_softmax<ND, BK>(s[mt], o[mt], pf[mt], m[mt], l[mt], kt + BK - 1 > first, kt, first + g,
                         first + g + 8, c, scale_log2);
    }
    // O += P V. One ldmatrix.x4.trans gives the B fragments of two 8-wide output tiles for
    // 16 keys (matrices: keys +0 / +8 of dims +0, then of dims +8), used by both m-tiles.
#pragma unroll
    for (int k = 0; k < BK / 16; ++k) {
#pragma unroll
      for (int n = 0; n < ND; n += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, tV + (k * 16 + (lm % 2) * 8 + lr) * S::kLd + n * 8 + (lm / 2) * 8);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(o[mt][n], pf[mt][k], b[0], b[1]);
          mma_bf16(o[mt][n + 1], pf[mt][k], b[2], b[3]);
        }
      }
    }
  };

  for (int it = 0; it < num_kt; ++it) {
    const int kt = it * BK;
    if constexpr (Q) {
      const bool next = it + 1 < num_kt;
      __syncthreads();  // the stage's conversion is visible to every warp; the raw stage is free
      if (next) {
        load_raw_tile<D, BK>(p, table, kvh, kt + BK, kv_end, raw);
        cp_async_commit();
      }
      attend(sK(0), sV(0), kt);
      if (next) cp_async_wait<0>();
      __syncthreads();  // every warp is done with the stage; the raw stage has landed
      if (next) convert_raw_tile<D, BK>(p, table, kt + BK, kv_end, raw, sK(0), sV(0));
    } else {
      const int st = it % 2;
      if (it + 1 < num_kt) {
        load_tile<D, BK>(p, table, kvh, kt + BK, kv_end, sK(st ^ 1), sV(st ^ 1));
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();  // this stage's copies (and the Q tile) are visible to every warp
      attend(sK(st), sV(st), kt);
      __syncthreads();  // every warp is done with this stage before it is refilled
    }
  }

#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const float l0 = group_sum<4>(l[mt][0]), l1 = group_sum<4>(l[mt][1]);
    const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f;
    const float inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
    const int r0 = w0 + 16 * mt + g, r1 = r0 + 8;
#pragma unroll
    for (int n = 0; n < ND; ++n) {
      const int col = h * D + n * 8 + 2 * c;
      if (r0 < nq)
        *reinterpret_cast<uint32_t*>(out + (tok0 + r0) * out_stride + col) =
            pack_bf16(o[mt][n][0] * inv0, o[mt][n][1] * inv0);
      if (r1 < nq)
        *reinterpret_cast<uint32_t*>(out + (tok0 + r1) * out_stride + col) =
            pack_bf16(o[mt][n][2] * inv1, o[mt][n][3] * inv1);
    }
  }
}

template <int D, bool Q, int BK>
void launch_tiles(const PrefillAttentionParams& p, cudaStream_t stream) {
  constexpr size_t bytes = Smem<D, Q, BK>::kBytes;
  // Past the 48 KB a launch gets by default: granted once per kernel instance and GPU.
  static PerDeviceOnce granted;
  once_per_device(granted, [] {
    OPTIMATE_CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_kernel<D, Q, BK>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(bytes)));
  });
  const dim3 grid(static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.num_tiles));
  prefill_attention_kernel<D, Q, BK><<<grid, kThreads, bytes, stream>>>(p);
  OPTIMATE_CUDA_CHECK_LAUNCH("prefill_attention_kernel");
}

// Key tiles of 32 exist at head_dim 128 only: at 64 the tiles of 64 take 54 KB, which every
// GPU of 8.0 and later gives a block.
template <int D, bool Q>
void launch(const PrefillAttentionParams& p, cudaStream_t stream) {
  const int64_t smem = device_kernel_paths().variant_smem_bytes;
  const int key_tile = prefill_attention_key_tile(D, Q, smem);
  if (key_tile == 64) return launch_tiles<D, Q, 64>(p, stream);
  if constexpr (D == 128)
    if (key_tile == 32) return launch_tiles<D, Q, 32>(p, stream);
  throw_unsupported(format_braces(
      "prefill attention at head_dim {} needs {} KB of shared memory a block; this GPU gives {} KB", D,
      prefill_attention_smem_bytes(D, Q, D == 128 ? 32 : 64) / 1024, smem / 1024));
}

}  // namespace

void prefill_attention(const PrefillAttentionParams& p, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(p.head_dim == 64 || p.head_dim == 128, "head_dim {} (64 or 128 supported)",
                       p.head_dim);
  OPTIMATE_SHAPE_CHECK(p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0,
                       "heads {} kv heads {}", p.num_heads, p.num_kv_heads);
  OPTIMATE_SHAPE_CHECK(p.q_row_stride % 8 == 0 && p.out_row_stride % 8 == 0,
                       "row strides {} {} must keep 16-byte alignment", p.q_row_stride,
                       p.out_row_stride);
  OPTIMATE_SHAPE_CHECK(p.num_tiles <= 65535, "num_tiles {} exceeds the grid limit", p.num_tiles);
  OPTIMATE_SHAPE_CHECK(p.block_size > 0, "block_size {}", p.block_size);
  check_kv_arena(p.cache, p.num_kv_heads, p.block_size, p.head_dim);
  if (p.num_tiles == 0) return;
  if (p.head_dim == 64) p.cache.quantized ? launch<64, true>(p, stream) : launch<64, false>(p, stream);
  else p.cache.quantized ? launch<128, true>(p, stream) : launch<128, false>(p, stream);
}

}  // namespace optimate::cuda
