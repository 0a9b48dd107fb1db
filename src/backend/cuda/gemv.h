// Linear layers for a handful of rows (decode): a bandwidth-bound kernel that streams each
// weight byte once, used by Gemm for m <= kGemvMaxRows where cuBLASLt's tiles leave the
// memory system idle (measured 34-41% of copy bandwidth on the 8B attention projections).
//
// The decode forward pass also uses it with its neighbours fused in, so one layer is four
// weight-streaming launches plus attention: the RMSNorm of the residual stream as the input
// load, and RoPE + KV-cache write, SiLU*mul, or the residual add as the epilogue.
#pragma once

#include <cstdint>
#include <string>

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "backend/cuda/kv_block.h"

namespace optimate::cuda {

inline constexpr int64_t kGemvMaxRows = 8;

// y[m, n] = x[m, k] . w[n, k]^T (+ bias[n]); x, w, bias bf16 row-major; y bf16 or fp32
// (out_f32). Needs m <= kGemvMaxRows and k % 8 == 0 (16-byte rows).
void gemv_linear(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias,
                 void* y, bool out_f32, int64_t m, int64_t n, int64_t k, cudaStream_t stream);

// The same with FP8 weights: y[m, n] = (x . dequant(w)^T)[., j] * w_scale[j] (+ bias[n]), the
// codes widened in registers and the bf16 x kept as it is. Needs k % 16 == 0.
void gemv_linear_fp8(const __nv_bfloat16* x, const __nv_fp8_e4m3* w, const float* w_scale,
                     const __nv_bfloat16* bias, void* y, bool out_f32, int64_t m, int64_t n, int64_t k,
                     cudaStream_t stream);

enum class GemvInput {
  kBf16,     // x [m, k] bf16
  kRmsNorm,  // bf16(residual[m, k] * rsqrt(mean(residual^2) + eps) * norm_weight[k]), exactly
             // what rmsnorm_residual(nullptr, ...) would have written
};

enum class GemvEpilogue {
  kStoreBf16,    // y [m, n] bf16
  kStoreF32,     // y [m, n] fp32
  kAddResidual,  // residual[m, n] (fp32) += bf16(out): the add rmsnorm_residual would do
  kSiluMul,      // rows [0, n/2) gate, [n/2, n) up: y [m, n/2] = bf16(silu(g) * u), with g, u
                 // rounded to bf16 first, as silu_mul over a stored gate_up would see them
  kRopeKvWrite,  // n = (heads + 2 kv_heads) * head_dim: y [m, n] = bf16 qkv with q and k
                 // rotated (as rope_inplace), k and v also written to the paged cache
                 // (as kv_cache_write; slot -1 writes nothing). A row bound for a quantized
                 // block is quantized by the warp that finishes it last: each warp holds two
                 // of its elements, so the warps count their writes in kv_row_counters
};

// Which kernel streams the weights. All store the same results (fp32 sums of exact products,
// in different orders); benchmarks compare them (cuda_decode_bench --only gemv).
enum class GemvKernel {
  kPairs,  // a warp per pair of output rows, fp32 FMAs; one launch wave after another, the split
           // of k filling the last wave (the original kernel, kept as the baseline)
  kMma,    // a warp per 8 pairs on mma.m16n8k16 (bf16 in, fp32 accumulate): the 16 weight rows
           // are the A tile, the m <= 8 rows of x the columns of B, FP8 codes widened once to
           // bf16 (exact) whatever m is; a persistent grid whose blocks stream one round after
           // another with the next round's loads in flight, split of k chosen per shape
  kMmaDeep,  // kMma with twice the loads in flight per warp (8 KB), one block per SM
  kAuto,     // kPairs for one row, kMma from two: per Llama-3-8B layer on the H200, one row
             // streams in 124.8 µs with kPairs against 132.5 with kMma (FP8 81.5 against 83.4),
             // two rows in 144.7 against 139.9 (FP8 114.4 against 90.0), eight in 335.7
             // against 159.8 (cuda_decode_bench --only gemv)
};

struct GemvParams {
  GemvKernel kernel = GemvKernel::kAuto;
  GemvInput input = GemvInput::kBf16;
  GemvEpilogue epilogue = GemvEpilogue::kStoreBf16;
  int64_t m = 0, n = 0, k = 0;
  const __nv_bfloat16* x = nullptr;            // kBf16
  const float* residual_in = nullptr;          // kRmsNorm: [m, k]
  const __nv_bfloat16* norm_weight = nullptr;  // kRmsNorm: [k]
  float eps = 1e-5f;
  const __nv_bfloat16* w = nullptr;            // [n, k], or null for FP8 weights:
  const __nv_fp8_e4m3* w_fp8 = nullptr;        // [n, k] e4m3 codes (k % 16 == 0), and
  const float* w_scale = nullptr;              // [n] their row scales, applied before bias
  const __nv_bfloat16* bias = nullptr;         // [n] or null
  void* y = nullptr;                           // kStore*, kSiluMul, kRopeKvWrite
  float* residual_out = nullptr;               // kAddResidual: [m, n]
  // kRopeKvWrite
  const int32_t* positions = nullptr;          // [m]
  const float* inv_freq = nullptr;             // [head_dim / 2]
  const int32_t* slot_mapping = nullptr;       // [m] write targets (kv_block.h)
  KvArena kv_cache;
  int* kv_row_counters = nullptr;              // [kGemvMaxRows, 2, kv_heads] zeros; kv_cache.quantized
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
  // Warps that share one group of output rows, each streaming a split_k-th of k (1, 2, 4 or
  // 8; kPairs: every split_k-th 256-element chunk); 0 picks the split per kernel and shape.
  int split_k = 0;
};

void gemv(const GemvParams& p, cudaStream_t stream);

// The split_k that gemv picks for one row (m = 1, plain input) of an [n, k] matrix.
int gemv_auto_split(int64_t n, int64_t k, GemvKernel kernel = GemvKernel::kAuto, bool fp8 = false);

// "pairs" / "mma" / "mma-deep" / "auto" (benchmark flags), and back; throws on an unknown name.
GemvKernel parse_gemv_kernel(const std::string& name);
const char* gemv_kernel_name(GemvKernel kernel);

}  // namespace optimate::cuda
