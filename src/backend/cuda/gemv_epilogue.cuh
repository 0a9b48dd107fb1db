// Device code the decode GEMV kernels share (gemv.cu, gemv_mma.cu): the RMSNorm input written
// into shared memory and the fused epilogues that store one (a, b) pair of output rows. See
// gemv.h for what each input and epilogue means.
#pragma once

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kv_quant.cuh"
#include "backend/cuda/rope_pair.cuh"

namespace optimate::cuda {
namespace {

constexpr int kGemvThreads = 256;
constexpr int kGemvWarps = kGemvThreads / 32;

__device__ __forceinline__ float round_bf16(float v) {
  return __bfloat162float(__float2bfloat16(v));
}

// Writes bf16(residual * rsqrt(mean square + eps) * weight) for m rows into xs, with the
// reduction order of rmsnorm_residual_kernel so both paths produce the same bits.
__device__ void normalize_rows(const GemvParams& p, int m, __nv_bfloat16* xs, float* warp_sums) {
  const int k = static_cast<int>(p.k);
  for (int i = 0; i < m; ++i) {
    const float* res = p.residual_in + static_cast<int64_t>(i) * k;
    float sum_sq = 0.0f;
    for (int j = threadIdx.x; j < k; j += kGemvThreads) sum_sq += res[j] * res[j];
    sum_sq = group_sum(sum_sq);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum_sq;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kGemvWarps; ++w) total += warp_sums[w];
    const float inv_rms = rsqrtf(total / k + p.eps);
    for (int j = threadIdx.x; j < k; j += kGemvThreads)
      xs[static_cast<int64_t>(i) * k + j] =
          __float2bfloat16(res[j] * inv_rms * __bfloat162float(p.norm_weight[j]));
    __syncthreads();
  }
}

// The kernels' prologue once their first weight loads are out: waits for the previous grid
// (programmatic launch), lets the next one start, and returns x's m rows, normalised into
// shared memory first for the RMSNorm input.
__device__ const __nv_bfloat16* gemv_input(const GemvParams& p, int m, unsigned char* smem, float* warp_sums) {
  wait_for_prior_grid();
  allow_next_grid();
  if (p.input != GemvInput::kRmsNorm) return p.x;
  auto* xs = reinterpret_cast<__nv_bfloat16*>(smem);
  normalize_rows(p, m, xs, warp_sums);
  return xs;
}

// Stores one (a, b) pair of row t. Returns the id of a quantized KV row this store completed
// (kRopeKvWrite), else -1.
__device__ int epilogue(const GemvParams& p, int t, int a, int b, bool has_b, float va, float vb) {
  const int64_t n = p.n;
  if (p.w_scale) {
    va *= p.w_scale[a];
    if (has_b) vb *= p.w_scale[b];
  }
  if (p.bias) {
    va += __bfloat162float(p.bias[a]);
    if (has_b) vb += __bfloat162float(p.bias[b]);
  }
  switch (p.epilogue) {
    case GemvEpilogue::kStoreBf16: {
      auto* y = static_cast<__nv_bfloat16*>(p.y) + t * n;
      y[a] = __float2bfloat16(va);
      if (has_b) y[b] = __float2bfloat16(vb);
      break;
    }
    case GemvEpilogue::kStoreF32: {
      float* y = static_cast<float*>(p.y) + t * n;
      y[a] = va;
      if (has_b) y[b] = vb;
      break;
    }
    case GemvEpilogue::kAddResidual: {
      float* r = p.residual_out + t * n;
      r[a] += round_bf16(va);
      if (has_b) r[b] += round_bf16(vb);
      break;
    }
    case GemvEpilogue::kSiluMul: {
      const float g = round_bf16(va), u = round_bf16(vb);
      static_cast<__nv_bfloat16*>(p.y)[t * (n / 2) + a] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
      break;
    }
    case GemvEpilogue::kRopeKvWrite: {
      const int D = static_cast<int>(p.head_dim);
      const int q_dim = static_cast<int>(p.num_heads) * D, kv_dim = static_cast<int>(p.num_kv_heads) * D;
      const float x0 = round_bf16(va), x1 = round_bf16(vb);
      __nv_bfloat16 o0 = __float2bfloat16(x0), o1 = __float2bfloat16(x1);
      if (a < q_dim + kv_dim) {
        float s, c;
        sincosf(static_cast<float>(p.positions[t]) * p.inv_freq[a % D], &s, &c);
        const float2 r = rope_pair(x0, x1, c, s);  // the same bits as rope.cu and rope_kv_write.cu
        o0 = __float2bfloat16(r.x);
        o1 = __float2bfloat16(r.y);
      }
      auto* y = static_cast<__nv_bfloat16*>(p.y) + t * n;
      y[a] = o0;
      y[b] = o1;
      const int target = p.slot_mapping[t];
      if (a < q_dim || target < 0) break;
      const bool is_v = a >= q_dim + kv_dim;
      const int local = (a - q_dim) % kv_dim;
      const int head = local / D, d = local % D;
      const int bs = static_cast<int>(p.block_size);
      if (!p.kv_cache.quantized) {
        const int64_t block = target / bs, offset = target % bs;
        const int64_t dst = ((block * p.num_kv_heads + head) * bs + offset) * D + d;
        auto* cache = reinterpret_cast<__nv_bfloat16*>(is_v ? p.kv_cache.v : p.kv_cache.k);
        cache[dst] = o0;
        cache[dst + D / 2] = o1;
        break;
      }
      const int code = kv_target_code(target);
      const int32_t row = kv_target_row(target);
      if (code == kKvBf16) {
        uint8_t* block = (is_v ? p.kv_cache.v : p.kv_cache.k) + (row / bs) * p.kv_cache.slot_bytes;
        auto* dst = reinterpret_cast<__nv_bfloat16*>(block + kv_codes_offset(kKvBf16, bs, D, head, row % bs)) + d;
        dst[0] = o0;
        dst[D / 2] = o1;
        break;
      }
      // The row's D / 2 pairs come from as many warps; the last to arrive quantizes it.
      __threadfence();
      const int id = (t * 2 + (is_v ? 1 : 0)) * static_cast<int>(p.num_kv_heads) + head;
      if (atomicAdd(p.kv_row_counters + id, 1) == D / 2 - 1) {
        p.kv_row_counters[id] = 0;
        return id;
      }
      break;
    }
  }
  return -1;
}

// Quantizes the KV rows that this warp's lanes completed (ids from epilogue), the whole warp
// on each in turn, from the rotated bf16 values in y.
template <int E>
__device__ void quantize_finished_rows(const GemvParams& p, int finished, int lane) {
  constexpr int D = 32 * E;
  unsigned pending = __ballot_sync(0xffffffffu, finished >= 0);
  if (!pending) return;
  __threadfence();  // the other warps' y stores, fenced before their counts, are visible
  const int kvh = static_cast<int>(p.num_kv_heads), bs = static_cast<int>(p.block_size);
  while (pending) {
    const int id = __shfl_sync(0xffffffffu, finished, __ffs(pending) - 1);
    pending &= pending - 1;
    const int head = id % kvh, is_v = (id / kvh) % 2, t = id / kvh / 2;
    const auto* src = static_cast<const __nv_bfloat16*>(p.y) + t * p.n + (p.num_heads + is_v * kvh + head) * D;
    float x[E];
    if constexpr (E == 2) {
      const uint32_t w = __ldcg(reinterpret_cast<const unsigned int*>(src) + lane);
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
      x[0] = f.x, x[1] = f.y;
    } else {
      const uint2 w = __ldcg(reinterpret_cast<const uint2*>(src) + lane);
      const float2 f0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.x));
      const float2 f1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.y));
      x[0] = f0.x, x[1] = f0.y, x[2] = f1.x, x[3] = f1.y;
    }
    const int32_t row = kv_target_row(p.slot_mapping[t]);
    uint8_t* block = (is_v ? p.kv_cache.v : p.kv_cache.k) + static_cast<int64_t>(row / bs) * p.kv_cache.slot_bytes;
    kv_store_block_row_warp<E>(kv_target_code(p.slot_mapping[t]), x, block, kvh, bs, head, row % bs, lane);
  }
}

}  // namespace
}  // namespace optimate::cuda
