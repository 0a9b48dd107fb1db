// Block-level pieces of the GPU sampler, shared by the fused kernel and the unfused baseline's
// last step. One block of kThreads threads works on one logits row.
//
// Values are compared through order keys (a float's bits mapped so unsigned order is float
// order), which lets a radix select find an exact element by its key. Weights exp(z - max z)
// are summed as 32.32 fixed point in 64-bit integers: integer addition is associative, so every
// sum (histogram bins, totals, the running sum of the draw) is the same whatever order threads
// add in, and a seeded row gives the same token on every run.
#pragma once

#include <cfloat>
#include <cstdint>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "backend/cuda/sampling.h"
#include "sampling/rng.h"

namespace optimate::cuda::sampling_detail {

constexpr int kThreads = 1024;
constexpr int kMaxBins = 2048;                  // the widest radix digit, 11 bits
constexpr float kWeightScale = 4294967296.0f;   // 2^32: the max element weighs exactly 2^32

__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// z = logit / temperature, rounded as the CPU's division (IEEE, whatever the build flags).
__device__ __forceinline__ float scaled(float logit, float temperature) {
  return __fdiv_rn(logit, temperature);
}

__device__ __forceinline__ unsigned long long fixed_weight(float z, float max_z) {
  return __float2ull_rn(expf(z - max_z) * kWeightScale);
}

struct ArgMax {
  float value;
  int index;
};

struct ArgMaxOp {
  __device__ ArgMax operator()(const ArgMax& a, const ArgMax& b) const {
    if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
    return a;
  }
};

using U64 = unsigned long long;
using ArgMaxReduce = cub::BlockReduce<ArgMax, kThreads>;
using U64Reduce = cub::BlockReduce<U64, kThreads>;
using U64Scan = cub::BlockScan<U64, kThreads>;

// Radix histograms are kept in kCopies copies, warp w adding into copy w % kCopies: logits
// crowd a few high-digit bins, and one shared copy serialized their atomics. Eight copies take
// 128 KB, more than the 99 KB a block gets on 8.6 and 8.9 parts, which take four
// (hist_copies_for).
template <int C>
struct SharedState {
  static constexpr int kCopies = C;
  union {
    ArgMaxReduce::TempStorage argmax;
    U64Reduce::TempStorage reduce;
    U64Scan::TempStorage scan;
  } cub;
  U64 hist[C][kMaxBins];
  ArgMax best;
  U64 total;
  U64 selected_above;
  uint32_t selected_bin;
  int chosen;
};

// The histogram copies of the state that fits `smem_bytes` of shared memory a block
// (KernelPaths::variant_smem_bytes): 8, or 4.
inline int hist_copies_for(int64_t smem_bytes) {
  return static_cast<int64_t>(sizeof(SharedState<8>)) <= smem_bytes ? 8 : 4;
}

// Max of the raw logits and its lowest index (torch.argmax's rule); every thread gets it.
template <typename Shared>
__device__ inline ArgMax block_argmax(const float* row, int vocab, Shared& sh) {
  ArgMax best{-FLT_MAX, vocab};
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = row[i];
    if (v > best.value || (v == best.value && i < best.index)) best = {v, i};
  }
  best = ArgMaxReduce(sh.cub.argmax).Reduce(best, ArgMaxOp{});
  if (threadIdx.x == 0) {
    // A row of NaN or -inf only still yields a valid token id.
    if (best.index >= vocab) best.index = 0;
    sh.best = best;
  }
  __syncthreads();
  return sh.best;
}

// Radix select over the keys of z >= floor_key, from the largest down. Counting (kWeighted
// false): returns the key of the target-th largest element, duplicates counted, i.e. the top-k
// threshold for target = k. Weighted: returns the key of the first element, in descending
// order, at which the running weight reaches fraction * (total weight), i.e. the last element
// top-p keeps. Three passes over the row (digits of 11, 11 and 10 bits).
template <bool kWeighted, typename Shared>
__device__ uint32_t radix_select(const float* row, int vocab, float temperature, float max_z,
                                 uint32_t floor_key, double target, Shared& sh) {
  constexpr int kHistCopies = Shared::kCopies;
  constexpr int kShifts[3] = {21, 10, 0};
  constexpr int kWidths[3] = {11, 11, 10};
  uint32_t prefix = 0;
  uint32_t prefix_mask = 0;
  double remaining = target;
#pragma unroll
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = kShifts[pass];
    const int num_bins = 1 << kWidths[pass];
    const uint32_t digit_mask = static_cast<uint32_t>(num_bins - 1);
    for (int b = threadIdx.x; b < kHistCopies * num_bins; b += kThreads)
      sh.hist[b / num_bins][b % num_bins] = 0;
    if (threadIdx.x == 0) sh.selected_bin = 0xffffffffu;
    __syncthreads();
    U64* hist = sh.hist[(threadIdx.x / 32) % kHistCopies];
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const float z = scaled(row[i], temperature);
      const uint32_t key = order_key(z);
      if (key < floor_key || (key & prefix_mask) != prefix) continue;
      atomicAdd(&hist[(key >> shift) & digit_mask], kWeighted ? fixed_weight(z, max_z) : U64{1});
    }
    __syncthreads();
    for (int b = threadIdx.x; b < num_bins; b += kThreads) {
      U64 sum = sh.hist[0][b];
#pragma unroll
      for (int c = 1; c < kHistCopies; ++c) sum += sh.hist[c][b];
      sh.hist[0][b] = sum;
    }
    __syncthreads();
    // Thread t owns the bins_per_thread bins counted down from num_bins - 1 - t * bins_per_thread,
    // so an exclusive scan over threads gives the total of all higher bins.
    const int bins_per_thread = num_bins / kThreads;
    const int top_bin = num_bins - 1 - static_cast<int>(threadIdx.x) * bins_per_thread;
    U64 mine = 0;
    for (int j = 0; j < bins_per_thread; ++j) mine += sh.hist[0][top_bin - j];
    U64 above = 0;
    U64 all = 0;
    U64Scan(sh.cub.scan).ExclusiveSum(mine, above, all);
    if (kWeighted && pass == 0) remaining = target * static_cast<double>(all);
    for (int j = 0; j < bins_per_thread; ++j) {
      const U64 h = sh.hist[0][top_bin - j];
      if (h > 0 && static_cast<double>(above) < remaining &&
          remaining <= static_cast<double>(above + h)) {
        sh.selected_bin = static_cast<uint32_t>(top_bin - j);
        sh.selected_above = above;
      }
      above += h;
    }
    __syncthreads();
    uint32_t bin = sh.selected_bin;
    if (bin == 0xffffffffu) {
      // Rounding left the target past the last element: take the lowest non-empty bin.
      if (threadIdx.x == 0) {
        uint32_t b = 0;
        while (b + 1 < static_cast<uint32_t>(num_bins) && sh.hist[0][b] == 0) ++b;
        U64 higher = 0;
        for (int c = num_bins - 1; c > static_cast<int>(b); --c) higher += sh.hist[0][c];
        sh.selected_bin = b;
        sh.selected_above = higher;
      }
      __syncthreads();
      bin = sh.selected_bin;
    }
    remaining -= static_cast<double>(sh.selected_above);
    prefix |= bin << shift;
    prefix_mask |= digit_mask << shift;
    __syncthreads();  // hist and selected_* are rewritten by the next pass
  }
  return prefix;
}

// Draws the token: among ids with key(z) >= keep_key, the smallest id whose running weight in
// ascending id order exceeds u * (total kept weight). Tiles of 4 * kThreads ids are scanned in
// order, stopping at the tile that holds the draw.
template <typename Shared>
__device__ inline int draw_token(const float* row, int vocab, float temperature, float max_z,
                                 uint32_t keep_key, float u, int fallback, Shared& sh) {
  U64 local = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float z = scaled(row[i], temperature);
    if (order_key(z) >= keep_key) local += fixed_weight(z, max_z);
  }
  const U64 total = U64Reduce(sh.cub.reduce).Sum(local);
  if (threadIdx.x == 0) {
    sh.total = total;
    sh.chosen = -1;
  }
  __syncthreads();
  const double target = static_cast<double>(u) * static_cast<double>(sh.total);
  U64 carry = 0;
  for (int base = 0; base < vocab; base += 4 * kThreads) {
    U64 w[4];
    U64 sum = 0;
    const int first = base + 4 * static_cast<int>(threadIdx.x);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      w[j] = 0;
      if (first + j < vocab) {
        const float z = scaled(row[first + j], temperature);
        if (order_key(z) >= keep_key) w[j] = fixed_weight(z, max_z);
      }
      sum += w[j];
    }
    U64 before = 0;
    U64 tile_total = 0;
    U64Scan(sh.cub.scan).ExclusiveSum(sum, before, tile_total);
    before += carry;
    if (sum > 0 && static_cast<double>(before) <= target &&
        target < static_cast<double>(before + sum)) {
      U64 running = before;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        running += w[j];
        if (w[j] > 0 && static_cast<double>(running) > target) {
          sh.chosen = first + j;
          break;
        }
      }
    }
    carry += tile_total;
    __syncthreads();
    if (sh.chosen >= 0) break;
  }
  const int chosen = sh.chosen;
  __syncthreads();
  return chosen >= 0 ? chosen : fallback;
}

}  // namespace optimate::cuda::sampling_detail
