// Small-m linear layer with optional fused neighbours (see gemv.h): gemv() checks the shapes and
// launches the kernel GemvParams::kernel names; GemvKernel::kMma lives in gemv_mma.cu, the
// GemvKernel::kPairs kernel here. Each of its warps owns a pair of
// output rows (a, a + half_span) so that epilogues that combine two rows stay in registers:
// half_span 1 pairs adjacent rows, head_dim / 2 pairs RoPE's rotate-half partners, n / 2
// pairs gate with up. `split` warps of a block share a pair, each streaming every split-th
// 256-element chunk of k, and their partial sums meet in shared memory in a fixed order.
//
// Weight loads are 16 bytes per lane (8 bf16, or 16 e4m3 codes widened in registers and scaled
// by their row's scale in the epilogue), evict-first, kUnroll chunks per row in flight, and the
// next batch is issued before the current one is consumed. The first batch goes out before
// wait_for_prior_grid(): under programmatic launch it overlaps the previous kernel's tail.
//
// Layouts: x [m, k] bf16 (or the fp32 residual stream, normalised into shared memory as
// [m, k] bf16), w [n, k] bf16 or e4m3 (+ w_scale [n]), outputs per gemv.h. Launch: ceil(pairs / (8 / split)) blocks
// of 256 threads; dynamic shared memory m * k * 2 bytes with the RMSNorm input.
#include "backend/cuda/gemv.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/e4m3.cuh"
#include "backend/cuda/gemv_epilogue.cuh"
#include "backend/cuda/gemv_mma.h"
#include "backend/cuda/kernel_paths.h"
#include "backend/cuda/per_device.h"
#include "backend/cuda/programmatic_launch.h"

namespace optimate::cuda {
namespace {

constexpr int kThreads = kGemvThreads;
constexpr int kWarps = kGemvWarps;
constexpr int kUnroll = 4;
// Weight elements one lane covers per 16-byte load, and one warp per load.
template <bool kFp8>
constexpr int kLaneElems = kFp8 ? 16 : 8;
template <bool kFp8>
constexpr int kChunk = 32 * kLaneElems<kFp8>;

__device__ __forceinline__ float dot8(const Bf16x8& a, const Bf16x8& b) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(a.h[i]);
    const float2 fb = __bfloat1622float2(b.h[i]);
    s = fmaf(fa.x, fb.x, s);
    s = fmaf(fa.y, fb.y, s);
  }
  return s;
}

// 16 e4m3 codes (w, in memory order) . 16 bf16 x values (x0 elements 0..7, x1 8..15).
__device__ __forceinline__ float dot16_fp8(const uint4& w, const Bf16x8& x0, const Bf16x8& x1) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // word i holds elements 4i .. 4i + 3
    const Bf16x8& xv = i < 2 ? x0 : x1;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const uint16_t pair = static_cast<uint16_t>(words[i] >> (16 * j));
      const uint32_t h2 = e4m3x2_to_half2_bits(pair);
      const float2 fw = __half22float2(*reinterpret_cast<const __half2*>(&h2));
      const float2 fx = __bfloat1622float2(xv.h[(i % 2) * 2 + j]);
      s = fmaf(fw.x, fx.x, s);
      s = fmaf(fw.y, fx.y, s);
    }
  }
  return s;
}

// Row a's and row b's 16 bytes at element cu, for kUnroll chunks `stride` elements apart.
// wa and wb are byte pointers to the rows.
template <bool kFp8>
__device__ __forceinline__ void load_batch(uint4 (&dst)[kUnroll][2], const uint8_t* wa,
                                           const uint8_t* wb, int c, int stride, int k,
                                           bool active) {
  constexpr int kBytes = kFp8 ? 1 : 2;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int cu = c + u * stride;
    if (active && cu < k) {
      dst[u][0] = __ldcs(reinterpret_cast<const uint4*>(wa + static_cast<int64_t>(cu) * kBytes));
      dst[u][1] = __ldcs(reinterpret_cast<const uint4*>(wb + static_cast<int64_t>(cu) * kBytes));
    }
  }
}

// Row i of x . the lane's 16 weight bytes at element cu.
template <bool kFp8>
__device__ __forceinline__ void accumulate(const uint4 (&w)[2], const __nv_bfloat16* xi, int cu,
                                           float& acc_a, float& acc_b) {
  if constexpr (kFp8) {
    const Bf16x8 x0 = load_bf16x8_raw(xi + cu), x1 = load_bf16x8_raw(xi + cu + 8);
    acc_a += dot16_fp8(w[0], x0, x1);
    acc_b += dot16_fp8(w[1], x0, x1);
  } else {
    const Bf16x8 xv = load_bf16x8_raw(xi + cu);
    acc_a += dot8(*reinterpret_cast<const Bf16x8*>(&w[0]), xv);
    acc_b += dot8(*reinterpret_cast<const Bf16x8*>(&w[1]), xv);
  }
}

template <int M, bool kFp8>
__global__ void __launch_bounds__(kThreads, 2)
    gemv_kernel(const GemvParams p, int split, int half_span, int num_pairs) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float partial[kWarps][2][M];
  __shared__ float warp_sums[kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int pair = blockIdx.x * (kWarps / split) + warp / split;
  const int part = warp % split;
  const bool active = pair < num_pairs;
  const int k = static_cast<int>(p.k), n = static_cast<int>(p.n);
  const int group = (active ? pair : 0) / half_span;
  const int a = group * 2 * half_span + (active ? pair : 0) % half_span;
  const int b = a + half_span;
  const bool has_b = b < n;
  constexpr int kRowBytesPerElem = kFp8 ? 1 : 2;
  const uint8_t* w_base = kFp8 ? reinterpret_cast<const uint8_t*>(p.w_fp8) : reinterpret_cast<const uint8_t*>(p.w);
  const uint8_t* wa = w_base + static_cast<int64_t>(a) * k * kRowBytesPerElem;
  const uint8_t* wb = w_base + static_cast<int64_t>(has_b ? b : a) * k * kRowBytesPerElem;
  const int stride = split * kChunk<kFp8>;
  int c = (part * 32 + lane) * kLaneElems<kFp8>;

  uint4 cur[kUnroll][2];
  load_batch<kFp8>(cur, wa, wb, c, stride, k, active);
  const __nv_bfloat16* x = gemv_input(p, M, smem, warp_sums);

  float acc[2][M];
#pragma unroll
  for (int i = 0; i < M; ++i) acc[0][i] = acc[1][i] = 0.0f;
  for (; c < k; c += kUnroll * stride) {
    uint4 next[kUnroll][2];
    load_batch<kFp8>(next, wa, wb, c + kUnroll * stride, stride, k, active);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int cu = c + u * stride;
      if (cu < k) {
#pragma unroll
        for (int i = 0; i < M; ++i)
          accumulate<kFp8>(cur[u], x + static_cast<int64_t>(i) * k, cu, acc[0][i], acc[1][i]);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      cur[u][0] = next[u][0];
      cur[u][1] = next[u][1];
    }
  }
#pragma unroll
  for (int i = 0; i < M; ++i) {
    acc[0][i] = group_sum(acc[0][i]);
    acc[1][i] = group_sum(acc[1][i]);
  }
  if (split > 1) {
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < M; ++i) {
        partial[warp][0][i] = acc[0][i];
        partial[warp][1][i] = acc[1][i];
      }
    }
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int i = 0; i < M; ++i) {
      float s0 = 0.0f, s1 = 0.0f;
      for (int s = 0; s < split; ++s) {
        s0 += partial[warp + s][0][i];
        s1 += partial[warp + s][1][i];
      }
      acc[0][i] = s0;
      acc[1][i] = s1;
    }
  }
  if (!active) return;
  int finished = -1;
#pragma unroll
  for (int i = 0; i < M; ++i)
    if (lane == i) finished = epilogue(p, i, a, b, has_b, acc[0][i], acc[1][i]);
  if (p.epilogue == GemvEpilogue::kRopeKvWrite && p.kv_cache.quantized) {
    if (p.head_dim == 64) quantize_finished_rows<2>(p, finished, lane);
    else quantize_finished_rows<4>(p, finished, lane);
  }
}

// The split whose grid fills its last wave of resident blocks best (ties to the smaller
// split): measured on H200, a decode GEMV's time follows its wave count, so a 1.45-wave grid
// loses a quarter of its bandwidth while the same matrix in 2.9 waves does not.
int pick_split(int64_t num_pairs, int64_t k, int64_t chunk, int64_t resident_blocks) {
  int best = 1;
  double best_fill = -1.0;
  for (int split = 1; split <= 4; split *= 2) {
    if (split > 1 && k < int64_t{2} * split * chunk) break;
    const int64_t blocks = (num_pairs * split + kWarps - 1) / kWarps;
    const int64_t waves = (blocks + resident_blocks - 1) / resident_blocks;
    const double fill = static_cast<double>(blocks) / static_cast<double>(waves * resident_blocks);
    if (fill > best_fill + 0.02) {
      best = split;
      best_fill = fill;
    }
  }
  return best;
}

template <int M, bool kFp8>
int64_t resident_blocks(size_t smem) {
  int per_sm = 0;
  OPTIMATE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_kernel<M, kFp8>, kThreads, smem));
  return static_cast<int64_t>(per_sm > 0 ? per_sm : 1) * gemv_device_sms();
}

template <int M, bool kFp8>
void launch_kernel(const GemvParams& p, int split, int half_span, int64_t num_pairs, cudaStream_t stream) {
  const size_t smem = p.input == GemvInput::kRmsNorm ? static_cast<size_t>(M * p.k * 2) : 0;
  if (split == 0) split = pick_split(num_pairs, p.k, kChunk<kFp8>, resident_blocks<M, kFp8>(smem));
  if (smem > 48 * 1024) {
    static PerDeviceOnce raised;
    static std::array<int64_t, kMaxDevices> limit{};
    const int device = once_per_device(raised, [] {
      int d = 0;
      OPTIMATE_CUDA_CHECK(cudaGetDevice(&d));
      limit[static_cast<size_t>(d)] = max_dynamic_smem(reinterpret_cast<const void*>(gemv_kernel<M, kFp8>));
      OPTIMATE_CUDA_CHECK(cudaFuncSetAttribute(gemv_kernel<M, kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(limit[static_cast<size_t>(d)])));
    });
    const int64_t smem_limit = limit[static_cast<size_t>(device)];
    OPTIMATE_SHAPE_CHECK(static_cast<int64_t>(smem) <= smem_limit, "an RMSNorm input of {} rows of {} takes {} bytes "
                         "of shared memory; the GPU gives this kernel {}", M, p.k, smem, smem_limit);
  }
  const int64_t pairs_per_block = kWarps / split;
  const unsigned blocks = static_cast<unsigned>((num_pairs + pairs_per_block - 1) / pairs_per_block);
  launch_programmatic(gemv_kernel<M, kFp8>, dim3(blocks), dim3(kThreads), smem, stream,
                      kFp8 ? "gemv_kernel<fp8>" : "gemv_kernel", p, split, half_span,
                      static_cast<int>(num_pairs));
}

template <int M>
void launch(const GemvParams& p, int split, int half_span, int64_t num_pairs, cudaStream_t stream) {
  if (p.w_fp8) launch_kernel<M, true>(p, split, half_span, num_pairs, stream);
  else launch_kernel<M, false>(p, split, half_span, num_pairs, stream);
}

}  // namespace

int gemv_device_sms() {
  static const int sms = [] {
    int dev = 0, v = 0;
    OPTIMATE_CUDA_CHECK(cudaGetDevice(&dev));
    OPTIMATE_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }();
  return sms;
}

int gemv_auto_split(int64_t n, int64_t k, GemvKernel kernel, bool fp8) {
  const int64_t num_pairs = (n + 1) / 2;
  if (kernel == GemvKernel::kAuto) kernel = GemvKernel::kPairs;  // what one row runs
  if (kernel == GemvKernel::kMma) return gemv_mma_grid(num_pairs, k, fp8, 0, kGemvMmaUnroll, gemv_device_sms(), 2).split;
  if (kernel == GemvKernel::kMmaDeep)
    return gemv_mma_grid(num_pairs, k, fp8, 0, kGemvMmaDeepUnroll, gemv_device_sms(), 1).split;
  return fp8 ? pick_split(num_pairs, k, kChunk<true>, resident_blocks<1, true>(0))
             : pick_split(num_pairs, k, kChunk<false>, resident_blocks<1, false>(0));
}

GemvKernel parse_gemv_kernel(const std::string& name) {
  if (name == "pairs") return GemvKernel::kPairs;
  if (name == "mma") return GemvKernel::kMma;
  if (name == "mma-deep") return GemvKernel::kMmaDeep;
  if (name == "auto") return GemvKernel::kAuto;
  throw_unsupported("unknown GEMV kernel '" + name + "' (pairs, mma, mma-deep or auto)");
}

const char* gemv_kernel_name(GemvKernel kernel) {
  switch (kernel) {
    case GemvKernel::kPairs: return "pairs";
    case GemvKernel::kMma: return "mma";
    case GemvKernel::kMmaDeep: return "mma-deep";
    case GemvKernel::kAuto: return "auto";
  }
  return "?";
}

void gemv(const GemvParams& params, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(params.m >= 1 && params.m <= kGemvMaxRows, "m {} (1..{})", params.m, kGemvMaxRows);
  GemvParams p = params;
  if (p.kernel == GemvKernel::kAuto) p.kernel = p.m == 1 ? GemvKernel::kPairs : GemvKernel::kMma;
  OPTIMATE_SHAPE_CHECK(p.k % 8 == 0 && p.k > 0 && p.n > 0 && p.n < (int64_t{1} << 30) &&
                           p.k < (int64_t{1} << 24),
                       "n {} k {} (k a multiple of 8)", p.n, p.k);
  OPTIMATE_SHAPE_CHECK((p.w != nullptr) != (p.w_fp8 != nullptr) &&
                           (p.input == GemvInput::kBf16 ? p.x != nullptr
                                                        : p.residual_in && p.norm_weight),
                       "missing input or weight (or both bf16 and FP8 weights)");
  OPTIMATE_SHAPE_CHECK(!p.w_fp8 || (p.w_scale && p.k % 16 == 0),
                       "FP8 weights need row scales and k a multiple of 16 (k {})", p.k);
  OPTIMATE_SHAPE_CHECK(p.input != GemvInput::kRmsNorm || p.m * p.k * 2 <= 200 * 1024,
                       "RMSNorm input of {} x {} does not fit shared memory", p.m, p.k);
  OPTIMATE_SHAPE_CHECK(p.split_k == 0 || p.split_k == 1 || p.split_k == 2 || p.split_k == 4 ||
                           p.split_k == 8,
                       "split_k {} (0, 1, 2, 4 or 8)", p.split_k);
  int64_t half_span = 1;
  if (p.epilogue == GemvEpilogue::kSiluMul) {
    OPTIMATE_SHAPE_CHECK(p.n % 2 == 0 && p.y, "gate/up rows {} must be even", p.n);
    half_span = p.n / 2;
  } else if (p.epilogue == GemvEpilogue::kRopeKvWrite) {
    OPTIMATE_SHAPE_CHECK(p.head_dim > 0 && p.head_dim % 2 == 0 && p.num_kv_heads > 0 &&
                             p.n == (p.num_heads + 2 * p.num_kv_heads) * p.head_dim,
                         "n {} != (heads {} + 2 kv heads {}) * head_dim {}", p.n, p.num_heads,
                         p.num_kv_heads, p.head_dim);
    OPTIMATE_SHAPE_CHECK(p.y && p.positions && p.inv_freq && p.slot_mapping && p.block_size > 0,
                         "RoPE/KV epilogue needs positions, inv_freq, slots and caches");
    check_kv_arena(p.kv_cache, p.num_kv_heads, p.block_size, p.head_dim);
    OPTIMATE_SHAPE_CHECK(!p.kv_cache.quantized || (p.kv_row_counters && (p.head_dim == 64 || p.head_dim == 128)),
                         "quantized KV from the GEMV needs row counters and head_dim 64 or 128 (got {})",
                         p.head_dim);
    half_span = p.head_dim / 2;
  } else if (p.epilogue == GemvEpilogue::kAddResidual) {
    OPTIMATE_SHAPE_CHECK(p.residual_out != nullptr, "residual epilogue needs residual_out");
  } else {
    OPTIMATE_SHAPE_CHECK(p.y != nullptr, "null output");
  }
  const int64_t num_pairs = half_span == 1 ? (p.n + 1) / 2 : p.n / 2;
  const int split = p.split_k;  // 0: the launcher picks it for its occupancy
  if (p.kernel != GemvKernel::kPairs) return launch_gemv_mma(p, split, static_cast<int>(half_span), num_pairs, stream);
  switch (p.m) {
    case 1: return launch<1>(p, split, static_cast<int>(half_span), num_pairs, stream);
    case 2: return launch<2>(p, split, static_cast<int>(half_span), num_pairs, stream);
    case 3: return launch<3>(p, split, static_cast<int>(half_span), num_pairs, stream);
    case 4: return launch<4>(p, split, static_cast<int>(half_span), num_pairs, stream);
    case 5: return launch<5>(p, split, static_cast<int>(half_span), num_pairs, stream);
    case 6: return launch<6>(p, split, static_cast<int>(half_span), num_pairs, stream);
    case 7: return launch<7>(p, split, static_cast<int>(half_span), num_pairs, stream);
    default: return launch<8>(p, split, static_cast<int>(half_span), num_pairs, stream);
  }
}

namespace {

GemvParams plain_params(const __nv_bfloat16* x, const __nv_bfloat16* bias, void* y, bool out_f32, int64_t m,
                        int64_t n, int64_t k) {
  GemvParams p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.x = x;
  p.bias = bias;
  p.y = y;
  p.epilogue = out_f32 ? GemvEpilogue::kStoreF32 : GemvEpilogue::kStoreBf16;
  return p;
}

}  // namespace

void gemv_linear(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias,
                 void* y, bool out_f32, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  GemvParams p = plain_params(x, bias, y, out_f32, m, n, k);
  p.w = w;
  gemv(p, stream);
}

void gemv_linear_fp8(const __nv_bfloat16* x, const __nv_fp8_e4m3* w, const float* w_scale,
                     const __nv_bfloat16* bias, void* y, bool out_f32, int64_t m, int64_t n, int64_t k,
                     cudaStream_t stream) {
  GemvParams p = plain_params(x, bias, y, out_f32, m, n, k);
  p.w_fp8 = w;
  p.w_scale = w_scale;
  gemv(p, stream);
}

}  // namespace optimate::cuda
