// Decode attention for a few rows: one thread-block cluster per (row, kv head), no split
// partials in global memory, no split counter, no second launch.
//
// At batch 1 the split kernels spend their time on a chain of dependent round trips (q, the
// K/V loads, partials out, the counter, the combine reading them back) rather than on bytes.
// Here each of a cluster's C blocks runs kWarps warps; warp w of block b is worker w C + b of
// the row's C kWarps workers, and worker i walks the i-th equal range of the row's 16-key
// chunks with the tensor-core kernel's warp loop (paged_attention_tc_warp.cuh: every KV
// precision, chunks in flight while one is computed), so a short row's chunks spread over the
// cluster's SMs first. Then:
//   1. each warp leaves its heads' running max, row sum and unnormalised outputs in shared
//      memory, and the block rescales them to one max per head (its block partial);
//   2. with C > 1, after a cluster barrier, block b combines slice b of the G x head_dim
//      outputs from every block's partial through distributed shared memory and writes them.
// The first chunk's loads go out before the wait on the previous kernel when the row's older
// keys are stable (programmatic launch), as in the tensor-core kernel.
//
// Launch: grid (C num_kv_heads, num_rows), cluster (C, 1, 1), kWarps * 32 threads (8, or 4 so
// that two blocks share an SM, or one shares it with the kernel before); the warp loop holds
// ~250 registers at head_dim 128, so one 8-warp block fills an SM's register file.
#include "backend/cuda/paged_attention_heads.h"

#include <cooperative_groups.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernel_paths.h"
#include "backend/cuda/paged_attention_tc_warp.cuh"
#include "backend/cuda/programmatic_launch.h"

namespace optimate::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kMaxGroup = 8;

// A block's partial per head: max (base 2), row sum and outputs at that max. The warps' part
// of the same shapes precedes it; rows are padded by one float so that the lanes' stores
// (16 apart) fall on two banks' worth of conflicts, not sixteen.
template <int kWarps, int D>
struct HeadPartials {
  static constexpr int kStride = D + 1;
  float warp_m[kWarps][kMaxGroup], warp_l[kWarps][kMaxGroup];
  float warp_o[kWarps][kMaxGroup][kStride];  // warp 0's rows end holding the block's outputs
  float block_m[kMaxGroup], block_l[kMaxGroup];
};

// Warp `threadIdx.x / 32` over keys [begin, end) of attention row r (token row `tok`, `ctx`
// keys) for the G query heads of kv head kvh: o and st end holding its unnormalised outputs and
// running state. The first chunk's loads go out before the wait on the previous kernel when they
// are older than the row's last key (which that kernel writes, with q), as in the tensor-core
// kernel. The Q variant keeps q in shared memory (as bf16 and in the quantized chunks' fp16 k
// order): one copy, written by warp 0, since the block's warps serve the same heads.
template <int D, bool Q, int U, int DEPTH>
__device__ __forceinline__ void attend_row_keys(const PagedAttentionParams& p, int r, int64_t tok, int ctx, int begin,
                                                int end, int kvh, int G, float (&o)[D / 8][2], RowState& st) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  TableWindow tw{p.block_tables + p.row_seq[r] * p.max_blocks_per_seq, p.max_blocks_per_seq};
  Chunk<D> buf[DEPTH];
  const bool early = p.prior_keys_stable && begin < end && begin + kTcChunk < ctx;
  if (early) load_chunk<D, Q, U>(buf[0], p, tw, begin, end, kvh, g, c, lane);
  wait_for_prior_grid();
  allow_next_grid();
  const int64_t head = static_cast<int64_t>(kvh) * G + g;
  uint4 q[D / 32];
#pragma unroll
  for (int s = 0; s < D / 32; ++s)
    q[s] = g < G ? load_16_bytes(p.q + tok * p.q_row_stride + head * D + 32 * s + 8 * c) : uint4{0, 0, 0, 0};
  __shared__ uint4 q_shared[Q ? D / 32 : 1][32];
  __shared__ uint2 q16[Q ? D / 16 : 1][32];
  if constexpr (Q) {
    if (threadIdx.x < 32) {
#pragma unroll
      for (int s = 0; s < D / 32; ++s) q_shared[s][lane] = q[s];
      store_q_f16<D>(q16, p.q + tok * p.q_row_stride + head * D, g < G, lane);
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = 0.0f;
  if (!early && begin < end) load_chunk<D, Q, U>(buf[0], p, tw, begin, end, kvh, g, c, lane);
  attend_keys<D, Q, U, DEPTH>(buf, p, tw, begin, end, kvh, q, q_shared, q16, o, st, p.scale * 1.4426950408889634f,
                              lane);
}

template <int kWarps, int D, bool Q, int U, int DEPTH>
__global__ void __launch_bounds__(kWarps * 32, 1) paged_attention_heads_kernel(const PagedAttentionParams p) {
  constexpr int kThreads = kWarps * 32;
  constexpr int NT = D / 8;
  const int C = static_cast<int>(gridDim.x / p.num_kv_heads);
  const int rank = static_cast<int>(blockIdx.x) % C, kvh = static_cast<int>(blockIdx.x) / C;
  const int r = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int G = static_cast<int>(p.num_heads / p.num_kv_heads);
  // Step inputs (rows, contexts, block tables) are written before the step's first kernel.
  const int64_t tok = p.rows ? p.rows[r] : r;
  const int ctx = p.row_ctx[r];
  const int chunks = (ctx + kTcChunk - 1) / kTcChunk;
  const int workers = C * kWarps;
  const int per = (chunks + workers - 1) / workers;
  const int worker = warp * C + rank;
  const int begin = min(ctx, worker * per * kTcChunk);
  const int end = min(ctx, begin + per * kTcChunk);
  float o[NT][2];
  RowState st;
  attend_row_keys<D, Q, U, DEPTH>(p, r, tok, ctx, begin, end, kvh, G, o, st);
  const float l = group_sum<4>(st.l);

  // 1. The warps' partials, then the block's. Lane (g, c) holds dims 64 h + 16 c + [0, 8) in
  // o[8 h + i][0] and + [8, 16) in o[8 h + i][1].
  __shared__ HeadPartials<kWarps, D> part;
  if (g < G) {
    if (c == 0) {
      part.warp_m[warp][g] = st.m;
      part.warp_l[warp][g] = l;
    }
    float* dst = &part.warp_o[warp][g][16 * c];
#pragma unroll
    for (int h = 0; h < D / 64; ++h)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        dst[64 * h + i] = o[8 * h + i][0] * st.v_unit;
        dst[64 * h + 8 + i] = o[8 * h + i][1] * st.v_unit;
      }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * D; idx += kThreads) {
    const int hg = idx / D, d = idx % D;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, part.warp_m[w][hg]);
    float sum = 0.0f, out = 0.0f;
    if (m != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float mw = part.warp_m[w][hg];
        const float e = mw == -INFINITY ? 0.0f : exp2f(mw - m);
        sum += e * part.warp_l[w][hg];
        out += e * part.warp_o[w][hg][d];
      }
    }
    if (C == 1) {
      p.out[tok * p.out_row_stride + (static_cast<int64_t>(kvh) * G + hg) * D + d] =
          __float2bfloat16(sum > 0.0f ? out / sum : 0.0f);
    } else {
      part.warp_o[0][hg][d] = out;  // only this thread reads or writes element (hg, d)
      if (d == 0) {
        part.block_m[hg] = m;
        part.block_l[hg] = sum;
      }
    }
  }
  if (C == 1) return;

  // 2. Across the cluster: block `rank` finishes slice `rank` of the outputs.
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int slice = G * D / C;  // C is a power of two up to 16, G * D a multiple of 64
  for (int idx = rank * slice + static_cast<int>(threadIdx.x); idx < (rank + 1) * slice; idx += kThreads) {
    const int hg = idx / D, d = idx % D;
    float bm[16], bl[16], bo[16];
#pragma unroll
    for (int b = 0; b < 16; ++b) {
      if (b >= C) break;
      const HeadPartials<kWarps, D>* remote = cluster.map_shared_rank(&part, b);
      bm[b] = remote->block_m[hg];
      bl[b] = remote->block_l[hg];
      bo[b] = remote->warp_o[0][hg][d];
    }
    float m = -INFINITY;
#pragma unroll
    for (int b = 0; b < 16; ++b)
      if (b < C) m = fmaxf(m, bm[b]);
    float sum = 0.0f, out = 0.0f;
    if (m != -INFINITY) {
#pragma unroll
      for (int b = 0; b < 16; ++b) {
        if (b >= C) break;
        const float e = bm[b] == -INFINITY ? 0.0f : exp2f(bm[b] - m);
        sum += e * bl[b];
        out += e * bo[b];
      }
    }
    p.out[tok * p.out_row_stride + (static_cast<int64_t>(kvh) * G + hg) * D + d] =
        __float2bfloat16(sum > 0.0f ? out / sum : 0.0f);
  }
  cluster.sync();  // no block leaves while another still reads its shared memory
}

template <int W, int D>
auto pick_kernel(const KvArena& cache) {
  if (!cache.quantized) return paged_attention_heads_kernel<W, D, false, -1, 2>;
  switch (cache.uniform_code) {
    case kKvFp8: return paged_attention_heads_kernel<W, D, true, kKvFp8, 2>;
    case kKvInt8: return paged_attention_heads_kernel<W, D, true, kKvInt8, 2>;
    case kKvInt4: return paged_attention_heads_kernel<W, D, true, kKvInt4, 4>;  // as the split kernel
    default: return paged_attention_heads_kernel<W, D, true, -1, 2>;
  }
}

using HeadsKernel = void (*)(PagedAttentionParams);

HeadsKernel kernel_for(const PagedAttentionParams& p, int warps) {
  OPTIMATE_SHAPE_CHECK(warps == 4 || warps == 8, "warps per block {} (4 or 8)", warps);
  if (warps == 4) return p.head_dim == 64 ? pick_kernel<4, 64>(p.cache) : pick_kernel<4, 128>(p.cache);
  return p.head_dim == 64 ? pick_kernel<8, 64>(p.cache) : pick_kernel<8, 128>(p.cache);
}

// The launch of `kernel` over grid (cluster_size num_kv_heads, num_rows); `programmatic`: as
// launch_programmatic does.
cudaLaunchConfig_t launch_config(const PagedAttentionParams& p, HeadsKernel kernel, int cluster_size, int warps,
                                 bool programmatic, cudaLaunchAttribute (&attr)[2]) {
  if (cluster_size > kHeadClusterMaxPortable)
    OPTIMATE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(cluster_size * p.num_kv_heads), static_cast<unsigned>(p.num_rows));
  cfg.blockDim = dim3(static_cast<unsigned>(32 * warps));
  int n = 0;
  if (cluster_size > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = static_cast<unsigned>(cluster_size);
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  if (programmatic) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  return cfg;
}

// This file is built for Hopper alone (CMakeLists.txt): no other GPU may reach its kernels.
void require_head_clusters() {
  const KernelPaths& paths = device_kernel_paths();
  if (!paths.head_clusters)
    throw_unsupported(format_braces(
        "the head-cluster decode kernel needs thread-block clusters and distributed shared memory (the Hopper "
        "path, compute capability 9.0); GPU {} runs the portable kernels{}",
        paths.gpu.device, paths.forced ? " (OPTIMATE_CUDA_KERNELS=portable)" : ""));
}

}  // namespace

int paged_attention_head_cluster_size(int64_t num_rows, int64_t num_kv_heads, int num_sms) {
  const int64_t heads = std::max<int64_t>(1, num_rows * num_kv_heads);
  if (heads > int64_t{kHeadBlocksPerSm} * num_sms) return 0;
  if (2 * heads > num_sms) return 1;
  int size = 1;
  while (size < kHeadClusterMaxPortable && 2 * heads * size * 2 <= num_sms) size *= 2;
  return size;
}

int paged_attention_head_clusters_resident(const PagedAttentionParams& p, int cluster_size, int warps) {
  require_head_clusters();
  const HeadsKernel kernel = kernel_for(p, warps);
  if (cluster_size == 1) {
    int per_sm = 0, device = 0, sms = 0;
    OPTIMATE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * warps, 0));
    OPTIMATE_CUDA_CHECK(cudaGetDevice(&device));
    OPTIMATE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return per_sm * sms;
  }
  cudaLaunchAttribute attr[2];
  const cudaLaunchConfig_t cfg = launch_config(p, kernel, cluster_size, warps, false, attr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return clusters;
}

bool paged_attention_head_clusters_fit(const PagedAttentionParams& p, int cluster_size) {
  // One occupancy query per kernel variant, cluster size and device: a GPU whose SMs are
  // partitioned (MIG) may hold no cluster of a size a whole H200 holds.
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int>, bool> fits;
  int device = 0;
  OPTIMATE_CUDA_CHECK(cudaGetDevice(&device));
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel_for(p, kHeadClusterWarps)), cluster_size, device);
  std::lock_guard lock(mu);
  const auto it = fits.find(key);
  if (it != fits.end()) return it->second;
  const bool fit = paged_attention_head_clusters_resident(p, cluster_size) > 0;
  fits.emplace(key, fit);
  return fit;
}

void paged_attention_head_clusters(const PagedAttentionParams& p, int cluster_size, cudaStream_t stream, int warps) {
  OPTIMATE_SHAPE_CHECK(cluster_size == 1 || cluster_size == 2 || cluster_size == 4 || cluster_size == 8 ||
                           cluster_size == 16,
                       "cluster size {} (1, 2, 4, 8 or 16)", cluster_size);
  require_head_clusters();
  const HeadsKernel kernel = kernel_for(p, warps);
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t cfg = launch_config(p, kernel, cluster_size, warps, programmatic_launch_enabled(), attr);
  cfg.stream = stream;
  const cudaError_t status = cudaLaunchKernelEx(&cfg, kernel, p);
  if (status != cudaSuccess) throw_cuda_error(status, "paged_attention_heads_kernel", __FILE__, __LINE__);
}

}  // namespace optimate::cuda
