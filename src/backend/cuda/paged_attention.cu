// Paged attention for single query rows (decode), split-K with GQA packing.
//
// One block handles one (kv head, row, split): it streams that split's keys and values once
// and serves all G = num_heads / num_kv_heads query heads that share them, so each KV byte is
// read once per row. Keys go through in chunks of 256: per chunk, scores for the G heads land
// in shared memory (TPT = head_dim / 8 lanes per key, one 16-byte load each, kUnroll keys per
// lane in flight; the chunk's cache rows are looked up once first), a per-head
// online softmax rescales the running sums, then the same lane layout accumulates p * V.
// With one split the block writes the normalised output; with several it writes unnormalised
// partial outputs plus (max, sum) per head, combined by the last block of each (row, kv head)
// to finish when split counters are given, else by a second kernel.
//
// A cache that may hold quantized blocks (KvArena::quantized) takes the kernel's Q variant: each
// key's entry gives its block's precision, and a lane loads its 8 elements' codes (16, 8 or 4
// bytes) and their scale and dequantizes them before the same dot products (kv_quant.cuh).
// Its splits start on a multiple of 4 keys, so the keys a warp loads together (2 or 4
// consecutive ones) share a block and the precision branch is warp-uniform when the block size
// is a multiple of 4. The bf16-only variant is the kernel as it was, with no branch at all.
//
// Layouts: q/out rows [num_heads, head_dim] bf16 at a row stride; cache blocks per kv_block.h
// ([num_kv_heads, block_size, head_dim] bf16 rows in a bf16 block); workspace: partial outputs
// [num_rows, num_heads, num_splits, head_dim] fp32 then (max, sum) [num_rows, num_heads,
// num_splits, 2] fp32.
// Launch: grid (num_kv_heads, num_rows, num_splits), 128 threads; combine: grid
// (num_rows, num_heads), head_dim threads.
#include "backend/cuda/paged_attention.h"

#include <algorithm>
#include <cfloat>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernel_paths.h"
#include "backend/cuda/kv_quant.cuh"
#include "backend/cuda/paged_attention_heads.h"
#include "backend/cuda/paged_attention_tc.h"
#include "backend/cuda/programmatic_launch.h"

namespace optimate::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kChunk = 256;
// Keys each lane group loads before using any. At about five blocks per SM (registers), one
// 16-byte load per thread in flight moved ~1.4 TB/s at batch 1024; four moved ~2 TB/s. Eight,
// and K/V tiles staged in shared memory by cp.async (two stages, three blocks per SM), measured
// no better (19.1 and 25.0 ms against 18.4 ms per batch-1024 step, docs/benchmarks.md).
constexpr int kUnroll = 4;

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

// Lane `lig`'s eight elements of key t (Q variant, packed as kv_quant.cuh says): the key's
// block's byte offset is chunk_base[t], its precision and token in block packed in
// chunk_meta[t]. Returns the precision code.
template <int D>
__device__ __forceinline__ int load_key_q(const uint8_t* arena, const int64_t* chunk_base, const int* chunk_meta,
                                          int t, int kvh, int hkv, int bs, int lig, uint4& packed) {
  const int meta = chunk_meta[t];
  const int code = meta >> 16, tok = meta & 0xffff;
  const uint8_t* block = arena + chunk_base[t];
  packed = kv_load8(code, block + kv_codes_offset(code, bs, D, kvh, tok),
                    block + kv_scales_offset(code, hkv, bs, D, kvh, tok), lig);
  return code;
}

template <int D, int GMAX, bool Q>
__global__ void __launch_bounds__(kThreads)
    paged_attention_kernel(const PagedAttentionParams p) {
  constexpr int TPT = D / 8;
  constexpr int NGROUP = kThreads / TPT;
  constexpr int NWARP = kThreads / 32;
  __shared__ float scores[GMAX][kChunk];
  __shared__ float head_m[GMAX], head_l[GMAX], head_alpha[GMAX];
  __shared__ float red[NGROUP][GMAX][D];
  // Per key: the cache row (block, kv head, token) of a bf16 cache; the Q variant's block
  // byte offset, and its precision code << 16 | token in block.
  __shared__ int64_t chunk_rows[kChunk];
  __shared__ int chunk_meta[Q ? kChunk : 1];

  wait_for_prior_grid();
  allow_next_grid();
  const int kvh = blockIdx.x;
  const int r = blockIdx.y;
  const int split = blockIdx.z;
  const int num_splits = gridDim.z;
  const int G = static_cast<int>(p.num_heads / p.num_kv_heads);
  const int64_t tok = p.rows ? p.rows[r] : r;
  const int ctx = p.row_ctx[r];
  int per = (ctx + num_splits - 1) / num_splits;
  if constexpr (Q) per = (per + 3) / 4 * 4;
  const int begin = min(ctx, split * per);
  const int end = min(ctx, begin + per);
  const int group = threadIdx.x / TPT;
  const int lig = threadIdx.x % TPT;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int32_t* table = p.block_tables + p.row_seq[r] * p.max_blocks_per_seq;
  const int bs = static_cast<int>(p.block_size);
  const int64_t hkv = p.num_kv_heads;
  const auto* k_cache = reinterpret_cast<const __nv_bfloat16*>(p.cache.k);
  const auto* v_cache = reinterpret_cast<const __nv_bfloat16*>(p.cache.v);

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

  for (int c0 = begin; c0 < end; c0 += kChunk) {
    const int n = min(kChunk, end - c0);
    // The chunk's cache rows first, so the loads below do not wait on the block table.
    for (int t = threadIdx.x; t < n; t += kThreads) {
      const int pos = c0 + t;
      if constexpr (Q) {
        const int32_t entry = table[pos / bs];
        chunk_rows[t] = static_cast<int64_t>(kv_entry_slot(entry)) * p.cache.slot_bytes;
        chunk_meta[t] = kv_entry_code(entry) << 16 | pos % bs;
      } else {
        chunk_rows[t] = (static_cast<int64_t>(table[pos / bs]) * hkv + kvh) * bs + pos % bs;
      }
    }
    __syncthreads();
    // Scores: kUnroll keys per lane group in flight at once; every lane runs the same trip
    // count so the group shuffles stay converged.
    for (int tb = 0; tb < n; tb += NGROUP * kUnroll) {
      Bf16x8 kraw[kUnroll];  // bf16, or (Q) codes and scale packed as kv_quant.cuh says
      int kcode[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int t = tb + u * NGROUP + group;
        if constexpr (Q) {
          uint4 packed{0, 0, 0, 0};
          kcode[u] = t < n ? load_key_q<D>(p.cache.k, chunk_rows, chunk_meta, t, kvh, static_cast<int>(hkv), bs,
                                          lig, packed)
                            : kKvBf16;
          kraw[u] = *reinterpret_cast<const Bf16x8*>(&packed);
        } else {
          kraw[u] = t < n ? load_bf16x8_raw(k_cache + chunk_rows[t] * D + lig * 8) : Bf16x8{};
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int t = tb + u * NGROUP + group;
        float k[8];
        if constexpr (Q) kv_dequant8(kcode[u], *reinterpret_cast<const uint4*>(&kraw[u]), k);
        else unpack_bf16x8(kraw[u], k);
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
    for (int tb = group; tb < n; tb += NGROUP * kUnroll) {
      Bf16x8 vraw[kUnroll];  // bf16, or (Q) codes and scale packed as kv_quant.cuh says
      int vcode[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int t = tb + u * NGROUP;
        if constexpr (Q) {
          uint4 packed{0, 0, 0, 0};
          vcode[u] = t < n ? load_key_q<D>(p.cache.v, chunk_rows, chunk_meta, t, kvh, static_cast<int>(hkv), bs,
                                          lig, packed)
                            : kKvBf16;
          vraw[u] = *reinterpret_cast<const Bf16x8*>(&packed);
        } else {
          vraw[u] = t < n ? load_bf16x8_raw(v_cache + chunk_rows[t] * D + lig * 8) : Bf16x8{};
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int t = tb + u * NGROUP;
        if (t >= n) break;
        float v[8];
        if constexpr (Q) kv_dequant8(vcode[u], *reinterpret_cast<const uint4*>(&vraw[u]), v);
        else unpack_bf16x8(vraw[u], v);
#pragma unroll
        for (int g = 0; g < GMAX; ++g) {
          if (g < G) {
            const float pr = scores[g][t];
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[g][i] += pr * v[i];
          }
        }
      }
    }
    __syncthreads();
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
  const dim3 grid(static_cast<unsigned>(p.num_kv_heads), static_cast<unsigned>(p.num_rows),
                  static_cast<unsigned>(p.num_splits));
  if (p.cache.quantized)
    launch_programmatic(paged_attention_kernel<D, GMAX, true>, grid, dim3(kThreads), 0, stream,
                        "paged_attention_kernel", p);
  else
    launch_programmatic(paged_attention_kernel<D, GMAX, false>, grid, dim3(kThreads), 0, stream,
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

DecodeAttentionKernel resolve_decode_kernel(DecodeAttentionKernel requested, int64_t num_heads,
                                            int64_t num_kv_heads, int64_t block_size) {
  if (requested != DecodeAttentionKernel::kAuto) return requested;
  const int64_t group = num_kv_heads > 0 ? num_heads / num_kv_heads : 0;
  return group >= 2 && group <= 8 && block_size % 16 == 0 ? DecodeAttentionKernel::kTensorCores
                                                           : DecodeAttentionKernel::kCudaCores;
}

DecodeAttentionKernel resolve_decode_kernel_for_rows(DecodeAttentionKernel requested, int64_t num_rows,
                                                     int64_t num_heads, int64_t num_kv_heads,
                                                     int64_t block_size, int num_sms, bool head_clusters) {
  const DecodeAttentionKernel k = resolve_decode_kernel(requested, num_heads, num_kv_heads, block_size);
  if (requested == DecodeAttentionKernel::kAuto && k == DecodeAttentionKernel::kTensorCores && head_clusters &&
      paged_attention_head_cluster_size(num_rows, num_kv_heads, num_sms) > 0)
    return DecodeAttentionKernel::kHeadClusters;
  return k;
}

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
  OPTIMATE_SHAPE_CHECK(p.block_size > 0 && p.block_size <= 0xffff, "block_size {}", p.block_size);
  check_kv_arena(p.cache, p.num_kv_heads, p.block_size, p.head_dim);
  if (p.num_rows == 0) return;
  const int64_t group = p.num_heads / p.num_kv_heads;
  const KernelPaths& paths = device_kernel_paths();
  const int num_sms = paths.gpu.num_sms;
  DecodeAttentionKernel kernel = resolve_decode_kernel_for_rows(p.kernel, p.num_rows, p.num_heads, p.num_kv_heads,
                                                                p.block_size, num_sms, paths.head_clusters);
  if (kernel == DecodeAttentionKernel::kHeadClusters) {
    OPTIMATE_SHAPE_CHECK(p.block_size % 16 == 0, "the head-cluster decode kernel needs a block size "
                         "that is a multiple of 16 (got {})", p.block_size);
    const int size = std::max(1, paged_attention_head_cluster_size(p.num_rows, p.num_kv_heads, num_sms));
    // kAuto falls back to the split kernel where no such cluster fits the device.
    if (p.kernel != DecodeAttentionKernel::kAuto || paged_attention_head_clusters_fit(p, size))
      return paged_attention_head_clusters(p, size, stream);
    kernel = DecodeAttentionKernel::kTensorCores;
  }
  if (kernel == DecodeAttentionKernel::kTensorCores) {
    OPTIMATE_SHAPE_CHECK(p.block_size % 16 == 0, "the tensor-core decode kernel needs a block size "
                         "that is a multiple of 16 (got {})", p.block_size);
    paged_attention_tensor_cores(p, stream);
  } else if (p.head_dim == 64) {
    launch_for_group<64>(p, group, stream);
  } else {
    launch_for_group<128>(p, group, stream);
  }
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

namespace {

// How many (row, kv head) blocks splitting aims for. The CUDA-core kernel's 4-warp blocks: none
// once there is one per SM, else two waves. The tensor-core kernel's 1-warp blocks (about
// eight fit on an SM): one wave at 32 keys or more a split (`near`), and up to 16 warps an SM
// (32 over a cache that may hold quantized blocks, whose chunks have fewer bytes to load and
// more to compute per byte) at 512 keys or more a split (`far`), which is also where no split
// is needed (`enough`). Measured on the H200 (Llama-3-8B shape, context
// 8192): batch 64 over bf16 runs 9% faster at 6 splits than at 3, over int8/fp8 11% faster at 9
// than at 3; batch 8 over int8/fp8 runs 1.8x slower at 64 splits of 128 keys than at 17.
struct SplitTargets {
  int64_t enough, near, far;
};

constexpr int64_t kNearKeysPerSplit = 32;
constexpr int64_t kFarKeysPerSplit = 512;

SplitTargets split_targets(const DecodeAttentionShape& s, int num_sms) {
  const bool tc = resolve_decode_kernel(s.kernel, s.num_heads, s.num_kv_heads, s.block_size) ==
                  DecodeAttentionKernel::kTensorCores;
  if (!tc) return {num_sms, 2 * int64_t{num_sms}, 0};
  const int64_t far = (s.quantized_kv ? 32 : 16) * int64_t{num_sms};
  return {far, 8 * int64_t{num_sms}, far};
}

int64_t splits_toward(int64_t target, int64_t base, int64_t max_ctx, int64_t keys_per_split) {
  return std::min((target + base - 1) / base, (max_ctx + keys_per_split - 1) / keys_per_split);
}

}  // namespace

int paged_attention_num_splits(int64_t num_rows, const DecodeAttentionShape& s, int64_t max_ctx,
                               int num_sms) {
  const int64_t base = std::max<int64_t>(1, num_rows * s.num_kv_heads);
  const SplitTargets t = split_targets(s, num_sms);
  if (base >= t.enough) return 1;
  const int64_t splits = std::max(splits_toward(t.near, base, max_ctx, kNearKeysPerSplit),
                                  splits_toward(t.far, base, max_ctx, kFarKeysPerSplit));
  return static_cast<int>(std::clamp<int64_t>(splits, 1, 64));
}

int64_t paged_attention_split_rows(const DecodeAttentionShape& s, int num_sms) {
  const SplitTargets t = split_targets(s, num_sms);
  return t.enough / std::max<int64_t>(1, s.num_kv_heads) + 1;
}

int64_t paged_attention_split_workspace_floats(const DecodeAttentionShape& s, int num_sms) {
  int64_t most = 0;
  const int64_t rows = paged_attention_split_rows(s, num_sms);
  for (int64_t r = 1; r <= rows; ++r) {
    const int splits = paged_attention_num_splits(r, s, int64_t{1} << 30, num_sms);
    most = std::max(most, paged_attention_workspace_floats(r, s.num_heads, splits, s.head_dim));
  }
  return most;
}

}  // namespace optimate::cuda
