// Routing, grouping and combine of a mixture-of-experts layer (moe_routing.h).
//
// moe_route: blocks of 4 warps, a warp per token; the token's logits and then probabilities sit
// in shared memory ([4, E] fp32), the top-k is k rounds of a warp argmax (ties to the lower
// index), and lane 0 renormalizes in slot order as the CPU twin does.
// moe_align: one block of 1024 threads: expert counts by shared-memory atomics, then thread 0
// walks the experts in order (offsets and the tile list: a few hundred entries even for a
// prefill), then every pair takes the next row of its expert's run.
// moe_combine: a grid of (token, 256 groups of 8 columns); each thread visits the token's
// slots in ascending expert order and sums weight * output in fp32.
#include "backend/cuda/moe_routing.h"

#include <algorithm>
#include <cfloat>
#include <climits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"

namespace optimate::cuda {
namespace {

constexpr int kRouteWarps = 4;
constexpr int kAlignThreads = 1024;
constexpr int kCombineThreads = 256;

__global__ void __launch_bounds__(kRouteWarps * 32)
    moe_route_kernel(const float* __restrict__ logits, int32_t* __restrict__ ids, float* __restrict__ weights,
                     int num_tokens, int num_experts, int top_k, bool renormalize) {
  extern __shared__ float probs_all[];  // [kRouteWarps, num_experts]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kRouteWarps + warp;
  if (t >= num_tokens) return;  // whole warps leave: no block barrier below
  float* probs = probs_all + warp * num_experts;
  const float* row = logits + static_cast<int64_t>(t) * num_experts;
  float max = -FLT_MAX;
  for (int e = lane; e < num_experts; e += 32) {
    probs[e] = row[e];
    max = fmaxf(max, probs[e]);
  }
  max = group_max(max);
  float sum = 0.0f;
  for (int e = lane; e < num_experts; e += 32) {
    probs[e] = expf(probs[e] - max);
    sum += probs[e];
  }
  sum = group_sum(sum);
  for (int e = lane; e < num_experts; e += 32) probs[e] = probs[e] / sum;
  __syncwarp();
  float chosen = 0.0f;  // lane s keeps slot s's probability
  for (int s = 0; s < top_k; ++s) {
    float best = -1.0f;
    int best_e = num_experts;
    for (int e = lane; e < num_experts; e += 32)
      if (probs[e] > best) best = probs[e], best_e = e;  // ascending e: a lane's first of equals
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(0xffffffffu, best, offset);
      const int other_e = __shfl_xor_sync(0xffffffffu, best_e, offset);
      if (other > best || (other == best && other_e < best_e)) best = other, best_e = other_e;
    }
    if (lane == s) chosen = best;
    if (lane == 0) ids[static_cast<int64_t>(t) * top_k + s] = best_e;
    __syncwarp();
    if (lane == 0) probs[best_e] = -2.0f;  // below every probability: never chosen again
    __syncwarp();
  }
  float total = 0.0f;
  if (renormalize)  // in slot order, as route_tokens sums
    for (int s = 0; s < top_k; ++s) total += __shfl_sync(0xffffffffu, chosen, s);
  if (lane < top_k) weights[static_cast<int64_t>(t) * top_k + lane] = renormalize ? chosen / total : chosen;
}

__global__ void __launch_bounds__(kAlignThreads)
    moe_align_kernel(const int32_t* __restrict__ ids, int num_pairs, int num_experts, int tile_rows,
                     int32_t* __restrict__ pairs, int32_t* __restrict__ row_of, MoeTile* __restrict__ tiles,
                     int32_t* __restrict__ num_tiles) {
  extern __shared__ int counts[];  // [num_experts], then the next free row of each [num_experts]
  int* next = counts + num_experts;
  for (int e = threadIdx.x; e < num_experts; e += kAlignThreads) counts[e] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < num_pairs; p += kAlignThreads) atomicAdd(&counts[ids[p]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int offset = 0, n = 0;
    for (int e = 0; e < num_experts; ++e) {
      next[e] = offset;
      const int end = offset + counts[e];
      for (int b = offset; b < end; b += tile_rows) tiles[n++] = {e, b, min(b + tile_rows, end), 0};
      offset = end;
    }
    *num_tiles = n;
  }
  __syncthreads();
  for (int p = threadIdx.x; p < num_pairs; p += kAlignThreads) {
    const int row = atomicAdd(&next[ids[p]], 1);
    pairs[row] = p;
    row_of[p] = row;
  }
}

__global__ void __launch_bounds__(kCombineThreads) moe_combine_kernel(MoeCombineParams p) {
  const int g = blockIdx.y * kCombineThreads + threadIdx.x;
  const int hidden = static_cast<int>(p.hidden), k = static_cast<int>(p.top_k);
  if (g >= hidden / 8) return;
  const int64_t t = blockIdx.x;
  const int32_t* ids = p.ids + t * k;
  float acc[8] = {};
  int last = -1;
  for (int j = 0; j < k; ++j) {  // the slots by ascending expert: the smallest id above the last
    int best = INT_MAX, slot = 0;
    for (int s = 0; s < k; ++s)
      if (ids[s] > last && ids[s] < best) best = ids[s], slot = s;
    last = best;
    const float w = p.weights[t * k + slot];
    float y[8];
    load_bf16x8(p.expert_out + static_cast<int64_t>(p.row_of[t * k + slot]) * hidden + 8 * g, y);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] += y[i] * w;
  }
  const int64_t at = t * hidden + 8 * g;
  switch (p.output) {
    case MoeCombineOutput::kBf16:
      store_bf16x8(p.out_bf16 + at, acc);
      break;
    case MoeCombineOutput::kAddResidual:
#pragma unroll
      for (int i = 0; i < 8; ++i) p.residual[at + i] += __bfloat162float(__float2bfloat16(acc[i]));
      break;
    case MoeCombineOutput::kF32:
#pragma unroll
      for (int i = 0; i < 8; ++i) p.out_f32[at + i] = acc[i];
      break;
  }
}

}  // namespace

int64_t moe_max_tiles(int64_t num_pairs, int64_t num_experts, int64_t tile_rows) {
  return num_pairs / tile_rows + std::min(num_experts, num_pairs);
}

void moe_route(const float* logits, int32_t* ids, float* weights, int64_t num_tokens, int64_t num_experts,
               int64_t top_k, bool renormalize, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(num_experts >= 1 && num_experts <= kMoeMaxExperts && top_k >= 1 &&
                           top_k <= std::min(num_experts, kMoeMaxTopK),
                       "top-{} of {} experts", top_k, num_experts);
  if (num_tokens == 0) return;
  const int blocks = static_cast<int>((num_tokens + kRouteWarps - 1) / kRouteWarps);
  const size_t smem = kRouteWarps * num_experts * sizeof(float);
  moe_route_kernel<<<blocks, kRouteWarps * 32, smem, stream>>>(logits, ids, weights, static_cast<int>(num_tokens),
                                                               static_cast<int>(num_experts),
                                                               static_cast<int>(top_k), renormalize);
  OPTIMATE_CUDA_CHECK_LAUNCH("moe_route_kernel");
}

void moe_align(const int32_t* ids, int64_t num_tokens, int64_t top_k, int64_t num_experts, int64_t tile_rows,
               int32_t* pairs, int32_t* row_of, MoeTile* tiles, int32_t* num_tiles, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(num_experts >= 1 && num_experts <= kMoeMaxExperts && tile_rows >= 1 &&
                           num_tokens * top_k < (int64_t{1} << 31),
                       "{} pairs over {} experts in tiles of {}", num_tokens * top_k, num_experts, tile_rows);
  const size_t smem = 2 * num_experts * sizeof(int);
  moe_align_kernel<<<1, kAlignThreads, smem, stream>>>(ids, static_cast<int>(num_tokens * top_k),
                                                       static_cast<int>(num_experts), static_cast<int>(tile_rows),
                                                       pairs, row_of, tiles, num_tiles);
  OPTIMATE_CUDA_CHECK_LAUNCH("moe_align_kernel");
}

void moe_combine(const MoeCombineParams& p, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(p.hidden % 8 == 0 && p.top_k >= 1 && p.top_k <= kMoeMaxTopK, "hidden {}, top-{}", p.hidden,
                       p.top_k);
  if (p.num_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(p.num_tokens),
                  static_cast<unsigned>((p.hidden / 8 + kCombineThreads - 1) / kCombineThreads));
  moe_combine_kernel<<<grid, kCombineThreads, 0, stream>>>(p);
  OPTIMATE_CUDA_CHECK_LAUNCH("moe_combine_kernel");
}

}  // namespace optimate::cuda
