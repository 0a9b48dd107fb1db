// The tensor-core decode GEMV (GemvKernel::kMma, gemv_mma.cu) as gemv() launches it, and the
// grid arithmetic the two GEMV kernels share.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/gemv.h"

namespace optimate::cuda {

int gemv_device_sms();

// A persistent grid for `rounds` equal pieces of work: how many of the `max_per_sm` resident
// blocks per SM to launch and which split of k, chosen so that the SM with the most rounds
// holds as few more than the average as possible (see gemv_mma.cu).
struct GemvMmaGrid {
  int split = 1;
  int64_t rounds = 0;  // groups of 8 / split output pairs, each one block's turn
  int64_t blocks = 0;
  int per_sm = 1;  // blocks per SM the choice assumes
};

// split 0 picks one; otherwise that split, with the best block count for it.
GemvMmaGrid gemv_mma_grid(int64_t num_pairs, int64_t k, bool fp8, int split, int unroll, int sms, int max_per_sm);

// k-blocks per batch of GemvKernel::kMma and kMmaDeep.
inline constexpr int kGemvMmaUnroll = 4;
inline constexpr int kGemvMmaDeepUnroll = 8;

// kMma or kMmaDeep, p checked by gemv(); half_span and num_pairs as gemv() derives them from the epilogue.
void launch_gemv_mma(const GemvParams& p, int split, int half_span, int64_t num_pairs, cudaStream_t stream);

}  // namespace optimate::cuda
