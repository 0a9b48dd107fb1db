// Flash-attention-style causal prefill over the paged cache, with bf16 tensor cores (WMMA,
// fp32 accumulate).
//
// One block computes one (query head, tile of 64 query rows). Its four warps own 16 query
// rows each. For every 64-key tile up to the tile's last position: the block gathers K and V
// from the cache's pages into shared memory; each warp computes S = Q K^T for its rows
// (tensor cores), applies the causal mask and an online softmax (two lanes per row, fp32),
// writes P in bf16, rescales its rows of the fp32 output kept in shared memory, and adds P V
// (tensor cores). The output accumulator lives in shared memory because WMMA fragments do
// not expose which row an element belongs to, and the rescale is per row.
//
// Layouts: q/out rows [num_heads, head_dim] bf16 at a row stride; caches [num_blocks,
// num_kv_heads, block_size, head_dim]; tiles [num_tiles, 4] int32 (see the header).
// Shared memory (head_dim 128): Q, K, V 3 x 17 KB, S 17 KB, P 9 KB, O 33 KB.
// Launch: grid (num_heads, num_tiles), 128 threads, dynamic shared memory.
#include "backend/cuda/prefill_attention.h"

#include <mma.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"

namespace optimate::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kThreads = 128;
constexpr int kBq = kPrefillTileRows;
constexpr int kBk = 64;

template <int D>
struct Smem {
  static constexpr int kLdQ = D + 8;     // bf16; the pad breaks bank conflicts
  static constexpr int kLdS = kBk + 4;   // fp32
  static constexpr int kLdP = kBk + 8;   // bf16
  static constexpr int kLdO = D + 4;     // fp32
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + sizeof(__nv_bfloat16) * kBq * kLdQ;
  static constexpr size_t kV = kK + sizeof(__nv_bfloat16) * kBk * kLdQ;
  static constexpr size_t kS = kV + sizeof(__nv_bfloat16) * kBk * kLdQ;
  static constexpr size_t kP = kS + sizeof(float) * kBq * kLdS;
  static constexpr size_t kO = kP + sizeof(__nv_bfloat16) * kBq * kLdP;
  static constexpr size_t kM = kO + sizeof(float) * kBq * kLdO;
  static constexpr size_t kL = kM + sizeof(float) * kBq;
  static constexpr size_t kBytes = kL + sizeof(float) * kBq;
};

template <int D>
__global__ void __launch_bounds__(kThreads) prefill_attention_kernel(const PrefillAttentionParams p) {
  using S = Smem<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  auto* sQ = reinterpret_cast<__nv_bfloat16*>(smem + S::kQ);
  auto* sK = reinterpret_cast<__nv_bfloat16*>(smem + S::kK);
  auto* sV = reinterpret_cast<__nv_bfloat16*>(smem + S::kV);
  auto* sS = reinterpret_cast<float*>(smem + S::kS);
  auto* sP = reinterpret_cast<__nv_bfloat16*>(smem + S::kP);
  auto* sO = reinterpret_cast<float*>(smem + S::kO);
  auto* sM = reinterpret_cast<float*>(smem + S::kM);
  auto* sL = reinterpret_cast<float*>(smem + S::kL);
  __shared__ int64_t tile_rows[kBk];  // cache row of each key of the current tile, -1 past the end

  const int h = blockIdx.x;
  const int* tile = p.tiles + 4 * blockIdx.y;
  const int64_t tok0 = tile[0];
  const int nq = tile[1];
  const int pos0 = tile[2];
  const int32_t* table = p.block_tables + tile[3] * p.max_blocks_per_seq;
  const int kvh = h / static_cast<int>(p.num_heads / p.num_kv_heads);
  const int bs = static_cast<int>(p.block_size);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  constexpr int kVecPerRow = D / 8;

  for (int idx = threadIdx.x; idx < kBq * kVecPerRow; idx += kThreads) {
    const int row = idx / kVecPerRow;
    const int c = (idx % kVecPerRow) * 8;
    Bf16x8 v{};
    if (row < nq)
      v = *reinterpret_cast<const Bf16x8*>(p.q + (tok0 + row) * p.q_row_stride + h * D + c);
    *reinterpret_cast<Bf16x8*>(sQ + row * S::kLdQ + c) = v;
  }
  for (int idx = threadIdx.x; idx < kBq * D; idx += kThreads)
    sO[(idx / D) * S::kLdO + idx % D] = 0.0f;
  if (threadIdx.x < kBq) {
    sM[threadIdx.x] = -INFINITY;
    sL[threadIdx.x] = 0.0f;
  }

  const int kv_end = pos0 + nq;  // keys [0, kv_end)
  const int row = warp * 16 + lane / 2;
  const int half = lane % 2;
  const int qpos = pos0 + row;
  for (int kt = 0; kt < kv_end; kt += kBk) {
    __syncthreads();  // previous tile's K/V no longer read; Q/O init visible on the first pass
    // The tile's cache rows first, then every thread's K and V loads issued together: a
    // gather that waited on the block table and then on each load in turn left this kernel
    // bound by memory latency.
    if (threadIdx.x < kBk) {
      const int pos = kt + threadIdx.x;
      tile_rows[threadIdx.x] = pos < kv_end
          ? (static_cast<int64_t>(table[pos / bs]) * p.num_kv_heads + kvh) * bs + pos % bs : -1;
    }
    __syncthreads();
    constexpr int kLoads = kBk * kVecPerRow / kThreads;
    Bf16x8 kv[kLoads], vv[kLoads];
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int idx = threadIdx.x + i * kThreads;
      const int64_t r = tile_rows[idx / kVecPerRow];
      const int c = (idx % kVecPerRow) * 8;
      kv[i] = r >= 0 ? *reinterpret_cast<const Bf16x8*>(p.k_cache + r * D + c) : Bf16x8{};
      vv[i] = r >= 0 ? *reinterpret_cast<const Bf16x8*>(p.v_cache + r * D + c) : Bf16x8{};
    }
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int idx = threadIdx.x + i * kThreads;
      const int j = idx / kVecPerRow;
      const int c = (idx % kVecPerRow) * 8;
      *reinterpret_cast<Bf16x8*>(sK + j * S::kLdQ + c) = kv[i];
      *reinterpret_cast<Bf16x8*>(sV + j * S::kLdQ + c) = vv[i];
    }
    __syncthreads();

    // S = Q K^T for this warp's 16 rows.
#pragma unroll
    for (int n = 0; n < kBk / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> s_frag;
      wmma::fill_fragment(s_frag, 0.0f);
#pragma unroll
      for (int k = 0; k < D / 16; ++k) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
        wmma::load_matrix_sync(a, sQ + warp * 16 * S::kLdQ + k * 16, S::kLdQ);
        wmma::load_matrix_sync(b, sK + n * 16 * S::kLdQ + k * 16, S::kLdQ);
        wmma::mma_sync(s_frag, a, b, s_frag);
      }
      wmma::store_matrix_sync(sS + warp * 16 * S::kLdS + n * 16, s_frag, S::kLdS,
                              wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax: two lanes per row, 32 columns each.
    {
      float* srow = sS + row * S::kLdS + half * 32;
      float mx = -INFINITY;
      for (int c = 0; c < 32; ++c) {
        const int kpos = kt + half * 32 + c;
        const bool keep = row < nq && kpos <= qpos;
        const float s = keep ? srow[c] * p.scale : -INFINITY;
        srow[c] = s;
        mx = fmaxf(mx, s);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float m_old = sM[row];
      const float m_new = fmaxf(m_old, mx);
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // fully masked (padding) rows
      float sum = 0.0f;
      __nv_bfloat16* prow = sP + row * S::kLdP + half * 32;
      for (int c = 0; c < 32; ++c) {
        const float e = __expf(srow[c] - base);
        prow[c] = __float2bfloat16(e);
        sum += e;
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      const float alpha = __expf(m_old - base);
      float* orow = sO + row * S::kLdO + half * (D / 2);
      for (int c = 0; c < D / 2; ++c) orow[c] *= alpha;
      __syncwarp();
      if (half == 0) {
        sM[row] = m_new;
        sL[row] = sL[row] * alpha + sum;
      }
    }
    __syncwarp();

    // O += P V for this warp's rows.
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> o_frag;
      float* o_ptr = sO + warp * 16 * S::kLdO + n * 16;
      wmma::load_matrix_sync(o_frag, o_ptr, S::kLdO, wmma::mem_row_major);
#pragma unroll
      for (int k = 0; k < kBk / 16; ++k) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
        wmma::load_matrix_sync(a, sP + warp * 16 * S::kLdP + k * 16, S::kLdP);
        wmma::load_matrix_sync(b, sV + k * 16 * S::kLdQ + n * 16, S::kLdQ);
        wmma::mma_sync(o_frag, a, b, o_frag);
      }
      wmma::store_matrix_sync(o_ptr, o_frag, S::kLdO, wmma::mem_row_major);
    }
  }
  __syncthreads();

  for (int idx = threadIdx.x; idx < kBq * kVecPerRow; idx += kThreads) {
    const int r = idx / kVecPerRow;
    const int c = (idx % kVecPerRow) * 8;
    if (r >= nq) continue;
    const float l = sL[r];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = sO[r * S::kLdO + c + i] * inv;
    store_bf16x8(p.out + (tok0 + r) * p.out_row_stride + h * D + c, v);
  }
}

template <int D>
void launch(const PrefillAttentionParams& p, cudaStream_t stream) {
  constexpr size_t bytes = Smem<D>::kBytes;
  OPTIMATE_CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_kernel<D>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.num_tiles));
  prefill_attention_kernel<D><<<grid, kThreads, bytes, stream>>>(p);
  OPTIMATE_CUDA_CHECK_LAUNCH("prefill_attention_kernel");
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
  if (p.num_tiles == 0) return;
  if (p.head_dim == 64) launch<64>(p, stream);
  else launch<128>(p, stream);
}

}  // namespace optimate::cuda
