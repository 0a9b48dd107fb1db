// Decode GEMV on the tensor cores (GemvKernel::kMma; inputs and epilogues per gemv.h).
//
// A warp owns a group of 8 output pairs (a, a + half_span), pairs as in gemv.cu, and a
// contiguous split-th of k. Its 16 weight rows are the A tile of mma.m16n8k16 (bf16 inputs,
// fp32 accumulators): tile row g is pair g's row a, row g + 8 its row b. The rows of x are B's
// 8 columns (columns m..7 zero), so one mma covers every row of x and the cost per weight byte
// does not grow with m. Lane l (g = l / 4, t = l % 4) loads 16 bytes of rows g and g + 8 at
// element t * P of each k-block of 4 P elements (P = 8 bf16 or 16 e4m3 codes). The sum over k
// does not care which element sits in which fragment slot, so each lane's 16 bytes are used as
// they lie: for the j-th mma of a k-block, the fragment's k slots 2t, 2t + 1, 2t + 8, 2t + 9
// hold the lane's elements 4j .. 4j + 3, and B takes the same four elements of x's row g.
// FP8 codes are widened to bf16 once (e4m3 -> f16 -> f32 -> bf16, all exact). Accumulator
// lanes end up holding pair g's a and b values for x rows 2t and 2t + 1: the epilogue's shape.
//
// The grid is persistent: blocks of 8 warps (8 / split groups, split warps each) take rounds
// r = blockIdx.x, + gridDim.x, ...; a warp's loads run on across rounds, the next batch issued
// before the current one is consumed, so a round's end (the split's combine in shared memory,
// the epilogue) costs no ramp. The first batch goes out before wait_for_prior_grid(), the
// RMSNorm input is written once per block.
//
// Layouts: x [m, k] bf16 (or the fp32 residual stream, normalised into shared memory as
// [m, k] bf16), w [n, k] bf16 or e4m3 (+ w_scale [n]). Launch: gemv_mma_grid() blocks of 256
// threads; dynamic shared memory m * k * 2 bytes with the RMSNorm input.
#include "backend/cuda/gemv_mma.h"

#include <algorithm>
#include <vector>

#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/e4m3.cuh"
#include "backend/cuda/gemv_epilogue.cuh"
#include "backend/cuda/kernel_paths.h"
#include "backend/cuda/per_device.h"
#include "backend/cuda/programmatic_launch.h"

namespace optimate::cuda {
namespace {

// k-blocks per batch (kU): two batches in flight per warp, 4 KB each for kMma (two blocks per
// SM), 8 KB for kMmaDeep (one block per SM, 255 registers a thread).
template <bool kFp8>
constexpr int kPiece = kFp8 ? 16 : 8;  // elements of one row a lane loads per k-block
template <bool kFp8>
constexpr int kBlockK = 4 * kPiece<kFp8>;

// This lane's two weight rows (tile rows g and g + 8) in one round.
struct LaneRows {
  const uint8_t* wa;
  const uint8_t* wb;
  int a, b;
  bool active, has_b;
};

template <bool kFp8>
__device__ __forceinline__ LaneRows lane_rows(const GemvParams& p, int group, int g, int half_span, int num_pairs) {
  constexpr int kBytes = kFp8 ? 1 : 2;
  LaneRows r;
  const int pair = group * 8 + g;
  r.active = pair < num_pairs;
  const int q = r.active ? pair : 0;
  r.a = (q / half_span) * 2 * half_span + q % half_span;
  r.b = r.a + half_span;
  r.has_b = r.b < p.n;
  const uint8_t* base = kFp8 ? reinterpret_cast<const uint8_t*>(p.w_fp8) : reinterpret_cast<const uint8_t*>(p.w);
  r.wa = base + static_cast<int64_t>(r.a) * p.k * kBytes;
  r.wb = base + static_cast<int64_t>(r.has_b ? r.b : r.a) * p.k * kBytes;
  return r;
}

// The lane's 16 bytes of both rows for kU k-blocks from element `start` (the first
// k-block's start, uniform over the warp); zeros where the row is absent or past `end`.
template <bool kFp8, int kU>
__device__ __forceinline__ void load_batch(uint4 (&dst)[kU][2], const LaneRows& r, int start, int t, int end,
                                           bool live) {
  constexpr int kBytes = kFp8 ? 1 : 2;
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int e = start + u * kBlockK<kFp8> + t * kPiece<kFp8>;
    const bool in = live && r.active && e < end;
    dst[u][0] = in ? __ldcs(reinterpret_cast<const uint4*>(r.wa + static_cast<int64_t>(e) * kBytes)) : uint4{};
    dst[u][1] = in && r.has_b ? __ldcs(reinterpret_cast<const uint4*>(r.wb + static_cast<int64_t>(e) * kBytes))
                              : uint4{};
  }
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Codes 2h and 2h + 1 of a word of four e4m3 codes as a bf16 pair (exact: every e4m3 value is
// an f16 and a bf16).
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t word, int h) {
  const uint16_t pair = static_cast<uint16_t>(word >> (16 * h));
  const uint32_t h2 = e4m3x2_to_half2_bits(pair);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2));
  return pack_bf16(f.x, f.y);
}

// c += this batch's tile . x^T. x rows g < m are read at the lane's elements; k-blocks past
// `end` are skipped (uniform), pieces past it are zero on both sides.
template <bool kFp8, int kU>
__device__ __forceinline__ void consume(float (&c)[4], const uint4 (&w)[kU][2], const __nv_bfloat16* x, int k,
                                        int m, int g, int t, int start, int end) {
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int block_start = start + u * kBlockK<kFp8>;
    if (block_start >= end) break;
    const int e = block_start + t * kPiece<kFp8>;
    const bool in = g < m && e < end;
    const __nv_bfloat16* xr = x + static_cast<int64_t>(g) * k + e;
    const uint32_t* wa = reinterpret_cast<const uint32_t*>(&w[u][0]);
    const uint32_t* wb = reinterpret_cast<const uint32_t*>(&w[u][1]);
    if constexpr (kFp8) {
      const uint4 x0 = in ? load_16_bytes(xr) : uint4{}, x1 = in ? load_16_bytes(xr + 8) : uint4{};
      const uint32_t xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
      for (int j = 0; j < 4; ++j)
        mma_bf16(c, e4m3x2_to_bf16x2(wa[j], 0), e4m3x2_to_bf16x2(wb[j], 0), e4m3x2_to_bf16x2(wa[j], 1),
                 e4m3x2_to_bf16x2(wb[j], 1), xs[2 * j], xs[2 * j + 1]);
    } else {
      const uint4 x0 = in ? load_16_bytes(xr) : uint4{};
      const uint32_t xs[4] = {x0.x, x0.y, x0.z, x0.w};
#pragma unroll
      for (int j = 0; j < 2; ++j)
        mma_bf16(c, wa[2 * j], wb[2 * j], wa[2 * j + 1], wb[2 * j + 1], xs[2 * j], xs[2 * j + 1]);
    }
  }
}

// The end of a round: the split's partial tiles summed in a fixed order, then the epilogue of
// pair g for x rows 2t and 2t + 1. Every warp of the block calls it together.
__device__ void finish_round(const GemvParams& p, float (&c)[4], const LaneRows& r, int split, int warp, int lane,
                             float (*partial)[32][4]) {
  const int part = warp % split, t = lane % 4;
  if (split > 1) {
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[warp][lane][i] = c[i];
    __syncthreads();
    if (part == 0) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float s = 0.0f;
        for (int q = 0; q < split; ++q) s += partial[warp + q][lane][i];
        c[i] = s;
      }
    }
    __syncthreads();
  }
  if (part != 0) return;
  int finished[2] = {-1, -1};
#pragma unroll
  for (int e = 0; e < 2; ++e)
    if (r.active && 2 * t + e < p.m) finished[e] = epilogue(p, 2 * t + e, r.a, r.b, r.has_b, c[e], c[2 + e]);
  if (p.epilogue == GemvEpilogue::kRopeKvWrite && p.kv_cache.quantized) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if (p.head_dim == 64) quantize_finished_rows<2>(p, finished[e], lane);
      else quantize_finished_rows<4>(p, finished[e], lane);
    }
  }
}

template <bool kFp8, int kU, int kMinBlocks>
__global__ void __launch_bounds__(kGemvThreads, kMinBlocks)
    gemv_mma_kernel(const GemvParams p, int split, int half_span, int num_pairs, int num_rounds) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float partial[kGemvWarps][32][4];
  __shared__ float warp_sums[kGemvWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int k = static_cast<int>(p.k), m = static_cast<int>(p.m);
  const int groups_per_round = kGemvWarps / split, part = warp % split;
  const int blocks_k = (k + kBlockK<kFp8> - 1) / kBlockK<kFp8>;
  const int blocks_per_part = (blocks_k + split - 1) / split;
  const int begin = part * blocks_per_part * kBlockK<kFp8>;
  const int end = min(k, (part + 1) * blocks_per_part * kBlockK<kFp8>);
  const int batches = (blocks_per_part + kU - 1) / kU;  // per round, every warp alike
  const int rounds = (num_rounds - static_cast<int>(blockIdx.x) + gridDim.x - 1) / gridDim.x;
  const int steps = rounds * batches;
  auto group_of = [&](int step) {
    return (static_cast<int>(blockIdx.x) + step / batches * static_cast<int>(gridDim.x)) * groups_per_round +
           warp / split;
  };
  auto start_of = [&](int step) { return begin + step % batches * kU * kBlockK<kFp8>; };

  LaneRows rows = lane_rows<kFp8>(p, group_of(0), g, half_span, num_pairs);
  uint4 cur[kU][2];
  load_batch<kFp8, kU>(cur, rows, start_of(0), t, end, steps > 0);
  const __nv_bfloat16* x = gemv_input(p, m, smem, warp_sums);

  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int step = 0; step < steps; ++step) {
    const int next = step + 1;
    const bool next_round = next % batches == 0;
    const LaneRows next_rows =
        next_round && next < steps ? lane_rows<kFp8>(p, group_of(next), g, half_span, num_pairs) : rows;
    uint4 ahead[kU][2];
    load_batch<kFp8, kU>(ahead, next_rows, start_of(next), t, end, next < steps);
    consume<kFp8, kU>(c, cur, x, k, m, g, t, start_of(step), end);
    if (next_round) {
      finish_round(p, c, rows, split, warp, lane, partial);
#pragma unroll
      for (int i = 0; i < 4; ++i) c[i] = 0.0f;
    }
    rows = next_rows;
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      cur[u][0] = ahead[u][0];
      cur[u][1] = ahead[u][1];
    }
  }
}

// Shared memory that keeps a second block off an SM (a KB past half of it, the system's share
// of each block counted): a grid planned at one block per SM must not land two on one SM, as it
// may when the previous kernel still holds some SMs as it starts (programmatic launch), since
// the blocks never move and the SM with two would take twice as long.
size_t one_block_per_sm_smem(const GpuDescription& gpu) {
  return static_cast<size_t>(std::min(gpu.smem_block_optin_bytes,
                                      gpu.smem_sm_bytes / 2 - gpu.smem_block_reserved_bytes + 1024));
}

template <bool kFp8, int kU, int kMinBlocks>
void launch(const GemvParams& p, int split, int half_span, int64_t num_pairs, cudaStream_t stream) {
  constexpr auto kernel = gemv_mma_kernel<kFp8, kU, kMinBlocks>;
  const GpuDescription& gpu = device_kernel_paths().gpu;
  static PerDeviceOnce raised;
  static std::array<int64_t, kMaxDevices> limit{};
  const int device = once_per_device(raised, [] {
    int d = 0;
    OPTIMATE_CUDA_CHECK(cudaGetDevice(&d));
    limit[static_cast<size_t>(d)] = max_dynamic_smem(reinterpret_cast<const void*>(kernel));
    OPTIMATE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(limit[static_cast<size_t>(d)])));
  });
  const int64_t smem_limit = limit[static_cast<size_t>(device)];
  const size_t smem = p.input == GemvInput::kRmsNorm ? static_cast<size_t>(p.m * p.k * 2) : 0;
  OPTIMATE_SHAPE_CHECK(static_cast<int64_t>(smem) <= smem_limit, "an RMSNorm input of {} rows of "
                       "{} takes {} bytes of shared memory; the GPU gives this kernel {}", p.m, p.k, smem,
                       smem_limit);
  int per_sm = 0;
  OPTIMATE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kGemvThreads, smem));
  const GemvMmaGrid grid =
      gemv_mma_grid(num_pairs, p.k, kFp8, split, kU, gemv_device_sms(), std::clamp(per_sm, 1, kMinBlocks));
  const size_t launch_smem = grid.per_sm == 1 && per_sm > 1 ? std::max(smem, one_block_per_sm_smem(gpu)) : smem;
  launch_programmatic(kernel, dim3(static_cast<unsigned>(grid.blocks)), dim3(kGemvThreads), launch_smem, stream,
                      kFp8 ? "gemv_mma_kernel<fp8>" : "gemv_mma_kernel", p, grid.split, half_span,
                      static_cast<int>(num_pairs), static_cast<int>(grid.rounds));
}

}  // namespace

// Blocks stream their rounds at the rate of the memory system, so a launch lasts as long as the
// SM with the most rounds (each SM's resident blocks share its bandwidth). With q blocks per SM
// and R rounds, that SM holds q * ceil(R / (q * sms)) rounds against R / sms on average. The
// choice maximises that fill, R / (sms * q * ceil(R / (q * sms))); among choices within 2% of
// the best, the most blocks (the most loads in flight), then the smaller split (fewer
// combines). A split needs a batch (`unroll` k-blocks) per warp. H200 (132 SMs), m = 1, two
// blocks per SM: QKV (384 groups of 8 pairs) takes split 8 on 132 blocks of ~2.9 rounds (0.97;
// 192 blocks of split 4 would leave 60 SMs twice the rounds of the others, 0.73); o and down
// split 8 on 256 blocks; gate_up split 8 on 264 blocks of ~6.8 rounds.
GemvMmaGrid gemv_mma_grid(int64_t num_pairs, int64_t k, bool fp8, int split, int unroll, int sms, int max_per_sm) {
  const int64_t block_k = fp8 ? kBlockK<true> : kBlockK<false>;
  const int64_t blocks_k = (k + block_k - 1) / block_k;
  const int64_t groups = (num_pairs + 7) / 8;
  struct Choice {
    GemvMmaGrid grid;
    double fill;
  };
  std::vector<Choice> choices;
  for (int s = 1; s <= kGemvWarps; s *= 2) {
    if (split != 0 && s != split) continue;
    if (split == 0 && s > 1 && blocks_k < int64_t{s} * unroll) break;
    const int64_t rounds = (groups * s + kGemvWarps - 1) / kGemvWarps;
    for (int q = 1; q <= max_per_sm; ++q) {
      const int64_t slots = int64_t{q} * sms;
      const int64_t per_sm_rounds = int64_t{q} * ((rounds + slots - 1) / slots);
      choices.push_back({{s, rounds, std::min(rounds, slots), q},
                         static_cast<double>(rounds) / static_cast<double>(sms * per_sm_rounds)});
    }
  }
  double best_fill = 0.0;
  for (const Choice& c : choices) best_fill = std::max(best_fill, c.fill);
  GemvMmaGrid best;
  for (const Choice& c : choices)  // split ascending, so ties in blocks keep the smaller split
    if (c.fill >= best_fill - 0.02 && c.grid.blocks > best.blocks) best = c.grid;
  return best;
}

void launch_gemv_mma(const GemvParams& p, int split, int half_span, int64_t num_pairs, cudaStream_t stream) {
  const bool deep = p.kernel == GemvKernel::kMmaDeep;
  if (p.w_fp8) {
    if (deep) launch<true, kGemvMmaDeepUnroll, 1>(p, split, half_span, num_pairs, stream);
    else launch<true, kGemvMmaUnroll, 2>(p, split, half_span, num_pairs, stream);
  } else {
    if (deep) launch<false, kGemvMmaDeepUnroll, 1>(p, split, half_span, num_pairs, stream);
    else launch<false, kGemvMmaUnroll, 2>(p, split, half_span, num_pairs, stream);
  }
}

}  // namespace optimate::cuda
