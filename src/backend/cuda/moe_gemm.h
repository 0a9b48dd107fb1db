// The experts' projections of a mixture-of-experts layer as one grouped GEMM each: every row
// tile that moe_align listed (rows of one expert) times that expert's weight matrix, on tensor
// cores (mma.sync m16n8k16, bf16 in, fp32 accumulate; FP8 weights widened to bf16 in registers,
// exactly, their row scales applied in the epilogue). Only listed tiles do work, so a decode
// step reads the weights of the experts its tokens chose and no others.
//
//   gate/up  (kSiluGateUp) rows gathered from the layer's normed input by token
//            (x[pairs[row] / top_k]); expert e's weight is [2 n, k], gate rows then up rows;
//            out[row, j] = bf16(silu(bf16(gate)) * bf16(up)), as silu_mul over a stored gate_up
//   down     (kPlain) rows of `a` in grouped order; weight [n, k]; out[row, j] = bf16(sum)
//
// Layouts: a [*, k] bf16; w [E, rows, k] bf16, or w_fp8 [E, rows, k] e4m3 with w_scale [E, rows];
// out [T * top_k, n] bf16 in grouped row order. Needs k % 8 == 0 (k % 16 with FP8), n % 8 == 0.
// Launch: a grid of (moe_max_tiles, n / tile columns) blocks of 128 threads; a block past the
// tile count returns at once. Two shapes, chosen by the tiles' row count: 16 rows (decode and
// small batches: tiles of 16 x 32 gate/up or 16 x 64 down columns, 4 stages of cp.async) and 64
// rows (prefill: 64 x 64 gate/up or 64 x 128 down, 3 stages).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "backend/cuda/moe_routing.h"

namespace optimate::cuda {

enum class MoeGemmKind { kSiluGateUp, kPlain };

// The tile heights moe_gemm has kernels for.
inline constexpr int64_t kMoeSmallTileRows = 16;
inline constexpr int64_t kMoeLargeTileRows = 64;

struct MoeGemmParams {
  MoeGemmKind kind = MoeGemmKind::kPlain;
  const __nv_bfloat16* a = nullptr;  // kSiluGateUp: [T, k] by token; kPlain: [T * top_k, k] grouped
  const int32_t* pairs = nullptr;    // kSiluGateUp: [T * top_k] (moe_align)
  int64_t top_k = 1;
  const __nv_bfloat16* w = nullptr;
  const __nv_fp8_e4m3* w_fp8 = nullptr;
  const float* w_scale = nullptr;
  int64_t num_experts = 0, n = 0, k = 0;
  __nv_bfloat16* out = nullptr;
  const MoeTile* tiles = nullptr;
  const int32_t* num_tiles = nullptr;
  int64_t max_tiles = 0;  // the grid's x: moe_max_tiles of the step
  int64_t tile_rows = kMoeSmallTileRows;  // what moe_align was given
};

void moe_gemm(const MoeGemmParams& p, cudaStream_t stream);

// The tile height for a step of `num_pairs` (token, expert) pairs over `num_experts` experts:
// 64-row tiles once an active expert averages more than 16 rows.
int64_t moe_tile_rows(int64_t num_pairs, int64_t num_experts);

}  // namespace optimate::cuda
