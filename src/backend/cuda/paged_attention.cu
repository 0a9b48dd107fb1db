// Paged attention for single query rows (decode), split-K with GQA packing.
//
// One block handles one (kv head, row, split): it streams that split's keys and values once
// and serves all G = num_heads / num_kv_heads query heads that share them, so each KV byte is
// read once per row. Keys go through in tiles of 64: per tile, scores for the G heads land
// in shared memory (TPT = head_dim / 8 lanes per key, 16 bytes each, read from K/V tiles that
// cp.async copies in two stages ahead of use), a per-head
// online softmax rescales the running sums, then the same lane layout accumulates p * V.
// With one split the block writes the normalised output; with several it writes unnormalised
// partial outputs plus (max, sum) per head, combined by the last block of each (row, kv head)
// to finish when split counters are given, else by a second kernel.
//
// Layouts: q/out rows [num_heads, head_dim] bf16 at a row stride; caches [num_blocks,
// num_kv_heads, block_size, head_dim] bf16; workspace: partial outputs
// [num_rows, num_heads, num_splits, head_dim] fp32 then (max, sum) [num_rows, num_heads,
// num_splits, 2] fp32.
// Launch: grid (num_kv_heads, num_rows, num_splits), 128 threads; combine: grid
// (num_rows, num_heads), head_dim threads.
#include "backend/cuda/paged_attention.h"

#include <algorithm>
#include <cfloat>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/programmatic_launch.h"

namespace optimate::cuda {
namespace {

constexpr int kThreads = 128;
// Keys per tile. Tiles of K and V are copied into shared memory with cp.async, two stages, so
// the next tile's copies are in flight while this one is computed: register-held loads (one or a
// few per thread) left the kernel bound by memory latency at 1.4-2 TB/s.
constexpr int kTile = 64;

template <int D>
__host__ __device__ constexpr size_t tile_smem_bytes() {
  return 2 * 2 * kTile * D * sizeof(__nv_bfloat16);  // two stages of K and V
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Starts copying keys [c0, c0 + n) of one (kv head, sequence) into a stage: each thread owns
// one 16-byte column of several keys; the block table is read first, all copies then issue.
template <int D>
__device__ __forceinline__ void issue_tile(const PagedAttentionParams& p, const int32_t* table,
                                           int kvh, int bs, int c0, int n, __nv_bfloat16* sk,
                                           __nv_bfloat16* sv) {
  constexpr int V = D / 8;               // 16-byte vectors per key
  constexpr int KPI = kThreads / V;      // keys per pass of the block
  constexpr int PASSES = kTile / KPI;
  const int c = (threadIdx.x % V) * 8;
  const int t0 = threadIdx.x / V;
  int64_t rows[PASSES];
#pragma unroll
  for (int i = 0; i < PASSES; ++i) {
    const int t = t0 + i * KPI;
    const int pos = c0 + t;
    rows[i] = t < n ? (static_cast<int64_t>(table[pos / bs]) * p.num_kv_heads + kvh) * bs + pos % bs : -1;
  }
#pragma unroll
  for (int i = 0; i < PASSES; ++i) {
    const int t = t0 + i * KPI;
    const int64_t row = rows[i] < 0 ? 0 : rows[i];
    cp_async16(sk + t * D + c, p.k_cache + row * D + c, rows[i] >= 0);
    cp_async16(sv + t * D + c, p.v_cache + row * D + c, rows[i] >= 0);
  }
  cp_async_commit();
}

// Output of head h for attention row r from its splits' partials: loads bypass L1, since
// the partials may come from other blocks of the running grid.
__device__ void combine_splits(const PagedAttentionParams& p, int r, int64_t h, int num_splits,
                               int first, int step) {
  const int D = static_cast<int>(p.head_dim);
  const int64_t tok = p.rows ? p.rows[r] : r;
  const int64_t base = (static_cast<int64_t>(r) * p.num_heads + h) * num_splits;
  const float* ml = p.workspace + p.num_rows * p.num_heads * num_splits * D;
  float m = -INFINITY;
  for (int s = 0; s < num_splits; ++s) m = fmaxf(m, __ldcg(ml + 2 * (base + s)));
  for (int d = first; d < D; d += step) {
    float o = 0.0f, l = 0.0f;
    if (m != -INFINITY) {
      for (int s = 0; s < num_splits; ++s) {
        const float w = __expf(__ldcg(ml + 2 * (base + s)) - m);
        l += w * __ldcg(ml + 2 * (base + s) + 1);
        o += w * __ldcg(p.workspace + (base + s) * D + d);
      }
    }
    p.out[tok * p.out_row_stride + h * D + d] = __float2bfloat16(l > 0.0f ? o / l : 0.0f);
  }
}

template <int D, int GMAX>
__global__ void __launch_bounds__(kThreads)
    paged_attention_kernel(const PagedAttentionParams p) {
  constexpr int TPT = D / 8;
  constexpr int NGROUP = kThreads / TPT;
  constexpr int NWARP = kThreads / 32;
  __shared__ float scores[GMAX][kTile];
  __shared__ float head_m[GMAX], head_l[GMAX], head_alpha[GMAX];
  // Two stages of K then V tiles [kTile][D]; after the loop, the per-group partial outputs.
  extern __shared__ __align__(16) unsigned char tiles_smem[];
  auto* stage_k = reinterpret_cast<__nv_bfloat16*>(tiles_smem);
  auto* red = reinterpret_cast<float(*)[GMAX][D]>(tiles_smem);
  static_assert(sizeof(float) * NGROUP * GMAX * D <= tile_smem_bytes<D>(), "partials fit the tiles");

  wait_for_prior_grid();
  allow_next_grid();
  const int kvh = blockIdx.x;
  const int r = blockIdx.y;
  const int split = blockIdx.z;
  const int num_splits = gridDim.z;
  const int G = static_cast<int>(p.num_heads / p.num_kv_heads);
  const int64_t tok = p.rows ? p.rows[r] : r;
  const int ctx = p.row_ctx[r];
  const int per = (ctx + num_splits - 1) / num_splits;
  const int begin = min(ctx, split * per);
  const int end = min(ctx, begin + per);
  const int group = threadIdx.x / TPT;
  const int lig = threadIdx.x % TPT;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int32_t* table = p.block_tables + p.row_seq[r] * p.max_blocks_per_seq;
  const int bs = static_cast<int>(p.block_size);
  const int64_t hkv = p.num_kv_heads;

  float q[GMAX][8];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    if (g < G) {
      load_bf16x8(p.q + tok * p.q_row_stride + (kvh * G + g) * D + lig * 8, q[g]);
#pragma unroll
      for (int i = 0; i < 8; ++i) q[g][i] *= p.scale;
    }
  }
  if (threadIdx.x < GMAX) {
    head_m[threadIdx.x] = -INFINITY;
    head_l[threadIdx.x] = 0.0f;
  }
  float acc[GMAX][8];
#pragma unroll
  for (int g = 0; g < GMAX; ++g)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.0f;
  __syncthreads();

  auto tile_k = [&](int stage) { return stage_k + stage * 2 * kTile * D; };
  auto tile_v = [&](int stage) { return stage_k + (stage * 2 + 1) * kTile * D; };
  if (begin < end) issue_tile<D>(p, table, kvh, bs, begin, min(kTile, end - begin), tile_k(0), tile_v(0));
  for (int c0 = begin, stage = 0; c0 < end; c0 += kTile, stage ^= 1) {
    const int n = min(kTile, end - c0);
    if (c0 + kTile < end) {
      issue_tile<D>(p, table, kvh, bs, c0 + kTile, min(kTile, end - c0 - kTile), tile_k(stage ^ 1),
                    tile_v(stage ^ 1));
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const __nv_bfloat16* sk = tile_k(stage);
    const __nv_bfloat16* sv = tile_v(stage);
    // Scores: every lane runs the same trip count so the group shuffles stay converged.
    for (int tb = 0; tb < n; tb += NGROUP) {
      const int t = tb + group;
      float k[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (t < n) load_bf16x8(sk + t * D + lig * 8, k);
#pragma unroll
      for (int g = 0; g < GMAX; ++g) {
        if (g < G) {
          float dot = 0.0f;
#pragma unroll
          for (int i = 0; i < 8; ++i) dot += q[g][i] * k[i];
          dot = group_sum<TPT>(dot);
          if (lig == 0 && t < n) scores[g][t] = dot;
        }
      }
    }
    __syncthreads();
    for (int g = warp; g < G; g += NWARP) {
      float mx = -INFINITY;
      for (int i = lane; i < n; i += 32) mx = fmaxf(mx, scores[g][i]);
      mx = group_max(mx);
      const float m_old = head_m[g];
      const float m_new = fmaxf(m_old, mx);
      float sum = 0.0f;
      for (int i = lane; i < n; i += 32) {
        const float e = __expf(scores[g][i] - m_new);
        scores[g][i] = e;
        sum += e;
      }
      sum = group_sum(sum);
      __syncwarp();
      if (lane == 0) {
        const float alpha = __expf(m_old - m_new);
        head_alpha[g] = alpha;
        head_l[g] = head_l[g] * alpha + sum;
        head_m[g] = m_new;
      }
    }
    __syncthreads();
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
      if (g < G) {
        const float alpha = head_alpha[g];
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] *= alpha;
      }
    }
    for (int t = group; t < n; t += NGROUP) {
      float v[8];
      load_bf16x8(sv + t * D + lig * 8, v);
#pragma unroll
      for (int g = 0; g < GMAX; ++g) {
        if (g < G) {
          const float pr = scores[g][t];
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[g][i] += pr * v[i];
        }
      }
    }
    __syncthreads();  // this stage is refilled two tiles on
  }

#pragma unroll
  for (int g = 0; g < GMAX; ++g)
    if (g < G)
#pragma unroll
      for (int i = 0; i < 8; ++i) red[group][g][lig * 8 + i] = acc[g][i];
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * D; idx += kThreads) {
    const int g = idx / D;
    const int d = idx % D;
    float o = 0.0f;
#pragma unroll
    for (int grp = 0; grp < NGROUP; ++grp) o += red[grp][g][d];
    const int64_t h = static_cast<int64_t>(kvh) * G + g;
    if (num_splits == 1) {
      const float l = head_l[g];
      p.out[tok * p.out_row_stride + h * D + d] = __float2bfloat16(l > 0.0f ? o / l : 0.0f);
    } else {
      const int64_t part = (static_cast<int64_t>(r) * p.num_heads + h) * num_splits + split;
      p.workspace[part * D + d] = o;
      if (d == 0) {
        float* ml = p.workspace + p.num_rows * p.num_heads * num_splits * D;
        ml[2 * part] = head_m[g];
        ml[2 * part + 1] = head_l[g];
      }
    }
  }
  if (num_splits == 1 || !p.split_counters) return;
  // The last split block of this (row, kv head) to finish combines all splits.
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    int* counter = p.split_counters + static_cast<int64_t>(r) * hkv + kvh;
    last = atomicAdd(counter, 1) == num_splits - 1;
    if (last) *counter = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  // Each split's weight exp(m_s - m) / sum goes to shared memory first, so the per-element
  // sums below are independent loads (unrolled) rather than one dependent chain per element.
  __shared__ float split_weight[GMAX][64];
  const float* ml = p.workspace + p.num_rows * p.num_heads * num_splits * D;
  const int64_t row_base = static_cast<int64_t>(r) * p.num_heads;
  for (int g = warp; g < G; g += NWARP) {
    const int64_t base = (row_base + kvh * G + g) * num_splits;
    float m = -INFINITY;
    for (int s = lane; s < num_splits; s += 32) m = fmaxf(m, __ldcg(ml + 2 * (base + s)));
    m = group_max(m);
    float l = 0.0f;
    for (int s = lane; s < num_splits; s += 32)
      if (m != -INFINITY) l += __expf(__ldcg(ml + 2 * (base + s)) - m) * __ldcg(ml + 2 * (base + s) + 1);
    l = group_sum(l);
    for (int s = lane; s < num_splits; s += 32)
      split_weight[g][s] = m != -INFINITY && l > 0.0f ? __expf(__ldcg(ml + 2 * (base + s)) - m) / l : 0.0f;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * D; idx += kThreads) {
    const int g = idx / D, d = idx % D;
    const int64_t base = (row_base + kvh * G + g) * num_splits;
    float o = 0.0f;
#pragma unroll 8
    for (int s = 0; s < num_splits; ++s) o += split_weight[g][s] * __ldcg(p.workspace + (base + s) * D + d);
    p.out[tok * p.out_row_stride + (static_cast<int64_t>(kvh) * G + g) * D + d] = __float2bfloat16(o);
  }
}

__global__ void paged_attention_combine_kernel(const PagedAttentionParams p, int num_splits) {
  wait_for_prior_grid();
  allow_next_grid();
  combine_splits(p, blockIdx.x, blockIdx.y, num_splits, threadIdx.x, blockDim.x);
}

template <int D, int GMAX>
void launch(const PagedAttentionParams& p, cudaStream_t stream) {
  constexpr size_t bytes = tile_smem_bytes<D>();
  // Set once, on the first (eager) launch, before any graph capture.
  static const bool configured = [] {
    OPTIMATE_CUDA_CHECK(cudaFuncSetAttribute(paged_attention_kernel<D, GMAX>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(bytes)));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>(p.num_kv_heads), static_cast<unsigned>(p.num_rows),
                  static_cast<unsigned>(p.num_splits));
  launch_programmatic(paged_attention_kernel<D, GMAX>, grid, dim3(kThreads), bytes, stream,
                      "paged_attention_kernel", p);
}

template <int D>
void launch_for_group(const PagedAttentionParams& p, int64_t group, cudaStream_t stream) {
  if (group == 1) return launch<D, 1>(p, stream);
  if (group == 2) return launch<D, 2>(p, stream);
  if (group <= 4) return launch<D, 4>(p, stream);
  return launch<D, 8>(p, stream);
}

}  // namespace

void paged_attention(const PagedAttentionParams& p, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(p.head_dim == 64 || p.head_dim == 128, "head_dim {} (64 or 128 supported)",
                       p.head_dim);
  OPTIMATE_SHAPE_CHECK(p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0 &&
                           p.num_heads / p.num_kv_heads <= 8,
                       "heads {} kv heads {} (group of at most 8)", p.num_heads, p.num_kv_heads);
  OPTIMATE_SHAPE_CHECK(p.num_splits >= 1 && p.num_splits <= 64, "num_splits {}", p.num_splits);
  OPTIMATE_SHAPE_CHECK(p.num_splits == 1 || p.workspace, "split attention needs a workspace");
  OPTIMATE_SHAPE_CHECK(p.num_rows <= 65535, "num_rows {} exceeds the grid limit", p.num_rows);
  OPTIMATE_SHAPE_CHECK(p.q_row_stride % 8 == 0 && p.out_row_stride % 8 == 0,
                       "row strides {} {} must keep 16-byte alignment", p.q_row_stride,
                       p.out_row_stride);
  if (p.num_rows == 0) return;
  const int64_t group = p.num_heads / p.num_kv_heads;
  if (p.head_dim == 64) launch_for_group<64>(p, group, stream);
  else launch_for_group<128>(p, group, stream);
  if (p.num_splits > 1 && !p.split_counters) {
    const dim3 grid(static_cast<unsigned>(p.num_rows), static_cast<unsigned>(p.num_heads));
    launch_programmatic(paged_attention_combine_kernel, grid,
                        dim3(static_cast<unsigned>(p.head_dim)), 0, stream,
                        "paged_attention_combine_kernel", p, static_cast<int>(p.num_splits));
  }
}

int64_t paged_attention_workspace_floats(int64_t num_rows, int64_t num_heads, int num_splits,
                                         int64_t head_dim) {
  if (num_splits <= 1) return 0;
  return num_rows * num_heads * num_splits * (head_dim + 2);
}

int paged_attention_num_splits(int64_t num_rows, int64_t num_kv_heads, int64_t max_ctx,
                               int num_sms) {
  const int64_t base = std::max<int64_t>(1, num_rows * num_kv_heads);
  if (base >= num_sms) return 1;
  int64_t splits = (2 * num_sms + base - 1) / base;
  splits = std::min(splits, (max_ctx + 31) / 32);
  return static_cast<int>(std::clamp<int64_t>(splits, 1, 64));
}

}  // namespace optimate::cuda
