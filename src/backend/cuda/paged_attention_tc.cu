// Decode attention on tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulate).
//
// One warp (one block) handles one (kv head, row, split): the G <= 8 query heads that share
// the KV head are the rows of the A tile (rows G..15 are zero), so every key is loaded once
// and costs two mma per 16 keys and head-dim tile instead of a dot product per head. Keys go
// through in chunks of 16, loaded straight from the cache into registers (no shared memory,
// no barriers), the next chunk in flight while the current one is computed.
//
// Register layouts. mma.m16n8k16 fragments (g = lane / 4, c = lane % 4): A holds rows g and
// g + 8, k = 2c, 2c + 1 and 2c + 8, 2c + 9; B holds k = 2c, 2c + 1 and 2c + 8, 2c + 9 of
// column g; C holds rows g and g + 8, columns 2c and 2c + 1. A dot product may sum its k in
// any order and an output may name its columns in any order, so both are permuted to make
// every load 16 contiguous bytes:
// - S = Q K^T, n = key. For the 32 head dims 32s .. 32s + 31, lane (g, c) loads dims
//   32s + 8c .. + 7 of query head g and of keys g and 8 + g; the first four dims feed k-step
//   2s, the last four k-step 2s + 1 (both operands use the same order).
// - O = P V, k = key, n = head dim. Output column g of n-tile j is head dim
//   64 (j / 8) + 8 g + j % 8, so lane (g, c) loads dims 64 h + 8 g .. + 7 of keys 2c, 2c + 1,
//   2c + 8, 2c + 9 and pairs keys with one byte permute per B register. P reaches the A
//   operand straight from S's accumulators (FlashAttention-2). Lane (g, c) ends holding head
//   dims 64 h + 16 c .. + 15 of query head g.
//
// A cache that may hold quantized blocks takes the Q variant: a chunk's 16 keys lie in one
// cache block, so its precision is warp-uniform; a quantized chunk's codes and scales are
// loaded in place of the bf16 values and run through fp16 mma on codes converted by byte
// permutes, its scales applied to scores and probabilities (paged_attention_tc_quant.cuh); a
// bf16 chunk takes the bf16 path. The bf16-only variant has no branch, nor has the variant
// for a static fp8, int8 or int4 cache (KvArena::uniform_code): built for that one precision,
// its chunks hold only that precision's codes and scales, not a bf16 chunk's registers, so
// more warps fit on a multiprocessor to keep loads in flight.
//
// The softmax works in base 2 (scores scaled by scale * log2 e); row sums stay per lane until
// the end. Partials for split-K go to the workspace in paged_attention.h's layout (max in
// natural-log units), and the last warp of a (row, kv head) combines them.
#include "backend/cuda/paged_attention_tc.h"

#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/paged_attention_tc_warp.cuh"
#include "backend/cuda/programmatic_launch.h"

namespace optimate::cuda {
namespace {

constexpr unsigned kFull = kTcFull;

// Output of the G heads of (row r, kv head kvh) from the first `splits` partials: every lane
// keeps G x D / 32 sums, so each split's partials for all heads are loads in flight together.
template <int D>
__device__ void combine_splits_warp(const PagedAttentionParams& p, int r, int kvh, int G,
                                    int splits, int64_t tok, int lane) {
  constexpr int kMaxGroup = 8;
  const int num_splits = gridDim.z;  // the workspace's stride
  const float* ml = p.workspace + p.num_rows * p.num_heads * num_splits * D;
  const int64_t head0 = static_cast<int64_t>(kvh) * G;
  const int64_t row_base = static_cast<int64_t>(r) * p.num_heads;
  float weight[kMaxGroup][2];  // split lane and lane + 32: exp(m_s - m) / sum
#pragma unroll
  for (int hg = 0; hg < kMaxGroup; ++hg) {
    weight[hg][0] = weight[hg][1] = 0.0f;
    if (hg >= G) continue;
    const int64_t base = (row_base + head0 + hg) * num_splits;
    float m_s[2], l_s[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int s = lane + 32 * i;
      m_s[i] = s < splits ? __ldcg(ml + 2 * (base + s)) : -INFINITY;
      l_s[i] = s < splits ? __ldcg(ml + 2 * (base + s) + 1) : 0.0f;
    }
    const float m = group_max(fmaxf(m_s[0], m_s[1]));
#pragma unroll
    for (int i = 0; i < 2; ++i) weight[hg][i] = m == -INFINITY || m_s[i] == -INFINITY ? 0.0f : __expf(m_s[i] - m);
    const float total = group_sum(weight[hg][0] * l_s[0] + weight[hg][1] * l_s[1]);
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    weight[hg][0] *= inv;
    weight[hg][1] *= inv;
  }
  float acc[kMaxGroup][D / 32];
#pragma unroll
  for (int hg = 0; hg < kMaxGroup; ++hg)
#pragma unroll
    for (int i = 0; i < D / 32; ++i) acc[hg][i] = 0.0f;
#pragma unroll 2
  for (int s = 0; s < splits; ++s) {
#pragma unroll
    for (int hg = 0; hg < kMaxGroup; ++hg) {
      if (hg >= G) continue;
      const float w = __shfl_sync(kFull, s < 32 ? weight[hg][0] : weight[hg][1], s % 32);
      const float* src = p.workspace + ((row_base + head0 + hg) * num_splits + s) * D + lane;
#pragma unroll
      for (int i = 0; i < D / 32; ++i) acc[hg][i] += w * __ldcg(src + 32 * i);
    }
  }
#pragma unroll
  for (int hg = 0; hg < kMaxGroup; ++hg) {
    if (hg >= G) continue;
    __nv_bfloat16* dst = p.out + tok * p.out_row_stride + (head0 + hg) * D + lane;
#pragma unroll
    for (int i = 0; i < D / 32; ++i) dst[32 * i] = __float2bfloat16(acc[hg][i]);
  }
}

// DEPTH chunks rotate through registers: DEPTH - 1 are in flight while one is computed.
template <int D, bool Q, int U, int DEPTH = 2>
__global__ void __launch_bounds__(32) paged_attention_tc_kernel(const PagedAttentionParams p) {
  constexpr int KS = D / 32;
  constexpr int NT = D / 8;
  const int kvh = blockIdx.x, r = blockIdx.y, split = blockIdx.z;
  const int lane = threadIdx.x, g = lane / 4, c = lane % 4;
  const int G = static_cast<int>(p.num_heads / p.num_kv_heads);
  // Step inputs (rows, contexts, block tables) are written before the step's first kernel, so
  // they may be read before wait_for_prior_grid().
  const int64_t tok = p.rows ? p.rows[r] : r;
  const int ctx = p.row_ctx[r];
  const int chunks = (ctx + kTcChunk - 1) / kTcChunk;
  // With in-launch combining, surplus warps of short rows leave at once.
  const int splits = p.split_counters ? paged_attention_tc_row_splits(static_cast<int>(gridDim.z), ctx)
                                      : static_cast<int>(gridDim.z);
  if (split >= splits) return;
  const int per = (chunks + splits - 1) / splits;
  const int begin = min(ctx, split * per * kTcChunk);
  const int end = min(ctx, begin + per * kTcChunk);
  const int64_t head = static_cast<int64_t>(kvh) * G + g;
  TableWindow tw{p.block_tables + p.row_seq[r] * p.max_blocks_per_seq, p.max_blocks_per_seq};

  // Keys older than the row's last come from earlier launches: the first chunk's loads may go
  // out while the kernel before (which writes the last key and q) is still running.
  Chunk<D> buf[DEPTH];
  const bool early = p.prior_keys_stable && begin < end && begin + kTcChunk < ctx;
  if (early) load_chunk<D, Q, U>(buf[0], p, tw, begin, end, kvh, g, c, lane);
  wait_for_prior_grid();
  allow_next_grid();
  uint4 q[KS];
#pragma unroll
  for (int s = 0; s < KS; ++s)
    q[s] = g < G ? load_16_bytes(p.q + tok * p.q_row_stride + head * D + 32 * s + 8 * c) : uint4{0, 0, 0, 0};
  // Q variant: q in shared memory, as bf16 and in the quantized chunks' fp16 k order.
  __shared__ uint4 q_shared[Q ? KS : 1][32];
  __shared__ uint2 q16[Q ? D / 16 : 1][32];
  if constexpr (Q) {
#pragma unroll
    for (int s = 0; s < KS; ++s) q_shared[s][lane] = q[s];
    store_q_f16<D>(q16, p.q + tok * p.q_row_stride + head * D, g < G, lane);  // then __syncwarp
  }
  float o[NT][2];
#pragma unroll
  for (int j = 0; j < NT; ++j) o[j][0] = o[j][1] = 0.0f;
  RowState st;
  const float scale_log2 = p.scale * 1.4426950408889634f;
  if (!early && begin < end) load_chunk<D, Q, U>(buf[0], p, tw, begin, end, kvh, g, c, lane);
  attend_keys<D, Q, U, DEPTH>(buf, p, tw, begin, end, kvh, q, q_shared, q16, o, st, scale_log2, lane);
  const float l = group_sum<4>(st.l);

  // Lane (g, c) holds dims 64 h + 16 c + [0, 8) in o[8 h + i][0] and + [8, 16) in o[8 h + i][1].
  if (splits == 1) {
    if (g < G) {
      const float inv = l > 0.0f ? st.v_unit / l : 0.0f;
      __nv_bfloat16* dst = p.out + tok * p.out_row_stride + head * D + 16 * c;
#pragma unroll
      for (int h = 0; h < D / 64; ++h) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          float v[8];
#pragma unroll
          for (int i = 0; i < 8; ++i) v[i] = o[8 * h + i][half] * inv;
          store_bf16x8(dst + 64 * h + 8 * half, v);
        }
      }
    }
    return;
  }
  const int num_splits = gridDim.z;
  const int64_t part = (static_cast<int64_t>(r) * p.num_heads + head) * num_splits + split;
  float* ml = p.workspace + p.num_rows * p.num_heads * num_splits * D;
  if (g < G) {
    float* dst = p.workspace + part * D + 16 * c;
#pragma unroll
    for (int h = 0; h < D / 64; ++h)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        dst[64 * h + i] = o[8 * h + i][0] * st.v_unit;
        dst[64 * h + 8 + i] = o[8 * h + i][1] * st.v_unit;
      }
    if (c == 0) {
      ml[2 * part] = st.m * 0.6931471805599453f;  // natural-log units; -inf stays -inf
      ml[2 * part + 1] = l;
    }
  }
  if (!p.split_counters) return;
  // The last warp of this (row, kv head) to finish combines every split.
  __threadfence();
  __syncwarp();
  int last = 0;
  if (lane == 0) {
    int* counter = p.split_counters + static_cast<int64_t>(r) * p.num_kv_heads + kvh;
    last = atomicAdd(counter, 1) == splits - 1;
    if (last) *counter = 0;
  }
  if (!__shfl_sync(kFull, last, 0)) return;
  __threadfence();
  combine_splits_warp<D>(p, r, kvh, G, splits, tok, lane);
}

}  // namespace

void paged_attention_tensor_cores(const PagedAttentionParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.num_kv_heads), static_cast<unsigned>(p.num_rows),
                  static_cast<unsigned>(p.num_splits));
  auto pick = [&](auto d) {
    constexpr int D = decltype(d)::value;
    if (!p.cache.quantized) return paged_attention_tc_kernel<D, false, -1>;
    switch (p.cache.uniform_code) {
      case kKvFp8: return paged_attention_tc_kernel<D, true, kKvFp8>;
      case kKvInt8: return paged_attention_tc_kernel<D, true, kKvInt8>;
      // An int4 chunk is half an int8 one's bytes: three in flight, not one.
      case kKvInt4: return paged_attention_tc_kernel<D, true, kKvInt4, 4>;
      default: return paged_attention_tc_kernel<D, true, -1>;
    }
  };
  auto kernel = p.head_dim == 64 ? pick(std::integral_constant<int, 64>{}) : pick(std::integral_constant<int, 128>{});
  launch_programmatic(kernel, grid, dim3(32), 0, stream, "paged_attention_tc_kernel", p);
}

}  // namespace optimate::cuda
