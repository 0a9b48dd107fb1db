// Flash-attention-style causal prefill over the paged KV cache, on bf16 tensor cores
// (mma.sync m16n8k16, fp32 accumulate), FlashAttention-2 style: every intermediate lives in
// registers.
//
// One block computes one (query head, tile of 64 query rows); its four warps own 16 rows each.
// For every 64-key tile up to the tile's last position the block gathers K (row-major) and V
// (transposed) from the cache's pages into shared memory. Each warp then computes S = Q K^T
// for its 16 rows in registers (Q's fragments are loaded once), applies the causal mask and an
// online softmax (a row's values sit in the four lanes of a quad), turns P into the A operand
// of the next product without leaving registers, and adds P V into its output fragments.
//
// Fragment layout of mma.m16n8k16 (g = lane / 4, c = lane % 4): A holds rows g and g + 8,
// columns 2c, 2c + 1 and 2c + 8, 2c + 9; B holds k rows 2c, 2c + 1, 2c + 8, 2c + 9 of column
// g; C holds rows g and g + 8, columns 2c and 2c + 1.
//
// Layouts: q/out rows [num_heads, head_dim] bf16 at a row stride; caches [num_blocks,
// num_kv_heads, block_size, head_dim]; tiles [num_tiles, 4] int32 (see the header).
// Launch: grid (num_heads, num_tiles), 128 threads, dynamic shared memory (K and V^T tiles).
#include "backend/cuda/prefill_attention.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"

namespace optimate::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kBk = 64;
static_assert(kPrefillTileRows == 16 * (kThreads / 32), "a warp owns 16 query rows of the tile");

template <int D>
struct Smem {
  static constexpr int kLdK = D + 8;    // bf16; the pad spreads a fragment's rows over all banks
  static constexpr int kLdVt = kBk + 8;
  static constexpr size_t kK = 0;
  static constexpr size_t kVt = kK + sizeof(__nv_bfloat16) * kBk * kLdK;
  static constexpr size_t kBytes = kVt + sizeof(__nv_bfloat16) * D * kLdVt;
};

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t load_u32(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

template <int D>
__global__ void __launch_bounds__(kThreads) prefill_attention_kernel(const PrefillAttentionParams p) {
  using S = Smem<D>;
  constexpr int KD = D / 16;   // k-steps over head_dim
  constexpr int ND = D / 8;    // 8-wide column tiles of the output
  constexpr int NK = kBk / 8;  // 8-wide column tiles of S
  extern __shared__ __align__(128) unsigned char smem[];
  auto* sK = reinterpret_cast<__nv_bfloat16*>(smem + S::kK);
  auto* sVt = reinterpret_cast<__nv_bfloat16*>(smem + S::kVt);
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
  const int g = lane / 4, c = lane % 4;
  constexpr int kVecPerRow = D / 8;

  // This lane's query rows (within the tile) and their positions.
  const int r0 = warp * 16 + g, r1 = r0 + 8;
  const int qpos0 = pos0 + r0, qpos1 = pos0 + r1;

  // Q fragments, loaded once; padding rows read as zero.
  uint32_t qf[KD][4];
  {
    const __nv_bfloat16* q0 = p.q + (tok0 + r0) * p.q_row_stride + h * D;
    const __nv_bfloat16* q1 = p.q + (tok0 + r1) * p.q_row_stride + h * D;
#pragma unroll
    for (int k = 0; k < KD; ++k) {
      const int col = k * 16 + 2 * c;
      qf[k][0] = r0 < nq ? load_u32(q0 + col) : 0u;
      qf[k][1] = r1 < nq ? load_u32(q1 + col) : 0u;
      qf[k][2] = r0 < nq ? load_u32(q0 + col + 8) : 0u;
      qf[k][3] = r1 < nq ? load_u32(q1 + col + 8) : 0u;
    }
  }
  float o[ND][4];
#pragma unroll
  for (int n = 0; n < ND; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  const float scale_log2 = p.scale * 1.4426950408889634f;  // exp(x) = exp2(x * log2 e)

  const int kv_end = pos0 + nq;  // keys [0, kv_end)
  for (int kt = 0; kt < kv_end; kt += kBk) {
    __syncthreads();  // the previous tile is no longer read
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
      const int64_t r = tile_rows[idx % kBk];
      const int col = (idx / kBk) * 8;
      kv[i] = r >= 0 ? *reinterpret_cast<const Bf16x8*>(p.k_cache + r * D + col) : Bf16x8{};
      vv[i] = r >= 0 ? *reinterpret_cast<const Bf16x8*>(p.v_cache + r * D + col) : Bf16x8{};
    }
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int idx = threadIdx.x + i * kThreads;
      const int j = idx % kBk;  // a warp's lanes take consecutive keys: V^T stores stay conflict-free
      const int col = (idx / kBk) * 8;
      *reinterpret_cast<Bf16x8*>(sK + j * S::kLdK + col) = kv[i];
      const __nv_bfloat16* v = reinterpret_cast<const __nv_bfloat16*>(&vv[i]);
#pragma unroll
      for (int e = 0; e < 8; ++e) sVt[(col + e) * S::kLdVt + j] = v[e];
    }
    __syncthreads();

    // S = Q K^T: this warp's 16 rows by the tile's 64 keys.
    float s[NK][4];
#pragma unroll
    for (int n = 0; n < NK; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
      const __nv_bfloat16* krow = sK + (n * 8 + g) * S::kLdK + 2 * c;
#pragma unroll
      for (int k = 0; k < KD; ++k) mma_bf16(s[n], qf[k], load_u32(krow + k * 16), load_u32(krow + k * 16 + 8));
    }
    // Causal mask and online softmax; a row's 64 values are spread over the lanes of a quad.
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int n = 0; n < NK; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int kpos = kt + n * 8 + 2 * c + e;
        s[n][e] = kpos <= qpos0 && r0 < nq ? s[n][e] * scale_log2 : -INFINITY;
        s[n][2 + e] = kpos <= qpos1 && r1 < nq ? s[n][2 + e] * scale_log2 : -INFINITY;
        mx0 = fmaxf(mx0, s[n][e]);
        mx1 = fmaxf(mx1, s[n][2 + e]);
      }
    }
#pragma unroll
    for (int d = 1; d < 4; d *= 2) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, d));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, d));
    }
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float base0 = mn0 == -INFINITY ? 0.0f : mn0;  // fully masked rows so far
    const float base1 = mn1 == -INFINITY ? 0.0f : mn1;
    const float alpha0 = exp2f(m0 - base0), alpha1 = exp2f(m1 - base1);
    m0 = mn0;
    m1 = mn1;
    float sum0 = 0.0f, sum1 = 0.0f;
    uint32_t pf[kBk / 16][4];  // P as the A operand of P V, one k-step per 16 keys
#pragma unroll
    for (int n = 0; n < NK; ++n) {
      const float p0 = exp2f(s[n][0] - base0), p1 = exp2f(s[n][1] - base0);
      const float p2 = exp2f(s[n][2] - base1), p3 = exp2f(s[n][3] - base1);
      sum0 += p0 + p1;
      sum1 += p2 + p3;
      pf[n / 2][(n % 2) * 2 + 0] = pack_bf16(p0, p1);
      pf[n / 2][(n % 2) * 2 + 1] = pack_bf16(p2, p3);
    }
#pragma unroll
    for (int d = 1; d < 4; d *= 2) {
      sum0 += __shfl_xor_sync(0xffffffffu, sum0, d);
      sum1 += __shfl_xor_sync(0xffffffffu, sum1, d);
    }
    l0 = l0 * alpha0 + sum0;
    l1 = l1 * alpha1 + sum1;
#pragma unroll
    for (int n = 0; n < ND; ++n) {
      o[n][0] *= alpha0;
      o[n][1] *= alpha0;
      o[n][2] *= alpha1;
      o[n][3] *= alpha1;
    }
    // O += P V, with V^T rows as the B operand.
#pragma unroll
    for (int n = 0; n < ND; ++n) {
      const __nv_bfloat16* vrow = sVt + (n * 8 + g) * S::kLdVt + 2 * c;
#pragma unroll
      for (int k = 0; k < kBk / 16; ++k) mma_bf16(o[n], pf[k], load_u32(vrow + k * 16), load_u32(vrow + k * 16 + 8));
    }
  }

  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f;
  const float inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
#pragma unroll
  for (int n = 0; n < ND; ++n) {
    const int col = h * D + n * 8 + 2 * c;
    if (r0 < nq)
      *reinterpret_cast<uint32_t*>(p.out + (tok0 + r0) * p.out_row_stride + col) = pack_bf16(o[n][0] * inv0, o[n][1] * inv0);
    if (r1 < nq)
      *reinterpret_cast<uint32_t*>(p.out + (tok0 + r1) * p.out_row_stride + col) = pack_bf16(o[n][2] * inv1, o[n][3] * inv1);
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
