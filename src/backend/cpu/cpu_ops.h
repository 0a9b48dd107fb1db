// The operators of a Llama-family decoder on the CPU, in fp32. They are the reference twins of
// the CUDA kernels: same layouts, same math, tested against Hugging Face through the whole model.
//
// Layouts: activations are row-major [num_tokens, features]; the query of token t, head h is
// q[t * num_heads * head_dim + h * head_dim ...]; the KV cache of one layer is
// [num_blocks, num_kv_heads, block_size, head_dim] (see backend/model_runner.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/cpu_thread_pool.h"
#include "backend/cpu/quantized_linear.h"

namespace optimate::cpu {

// Element-wise ops take the runner's thread pool and split rows across it only for long
// prefills, where they would otherwise be the serial part of the step (null: the calling thread).

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, for each of num_tokens rows of `dim`.
void rms_norm(const float* x, const float* weight, float* out, int64_t num_tokens, int64_t dim,
              float eps, CpuThreadPool* pool = nullptr);

// y[t, :] = x[t, :] @ w^T (+ y[t, :] when accumulate): w is a Linear weight [out_dim, in_dim].
// One row goes through sgemv, 2 to kSmallMaxTokens rows through small_m_linear (one pass over
// the weights), more through sgemm. The output features are split across
// `num_threads` OpenMP threads, each calling single-threaded OpenBLAS on its slice of w: one
// threading runtime for the whole forward pass, because OpenBLAS's own pthreads and OpenMP's
// spin-waiting workers starve each other when cores are shared.
void linear(const float* x, const float* w, float* y, int64_t num_tokens, int64_t in_dim,
            int64_t out_dim, bool accumulate = false, int num_threads = 1);

// The same for a weight the runner holds as a CpuMatrix (out_dim = w.rows, in_dim = w.cols).
// Quantized weights: up to kQuantizedMaxTokens rows through the quantized kernels (one pass
// over the blocks per eight tokens), more through sgemm on fp32 copies of a few weight rows at a
// time.
inline constexpr int64_t kQuantizedMaxTokens = 16;
void linear(const float* x, const CpuMatrix& w, float* y, int64_t num_tokens,
            bool accumulate = false, int num_threads = 1);

// Makes OpenBLAS run every call on the calling thread (see linear()).
void use_single_threaded_blas();

// Adds bias[out_dim] to each row of y.
void add_bias(float* y, const float* bias, int64_t num_tokens, int64_t out_dim);

// Rotary embedding, "rotate half" (NeoX/Hugging Face) form, in place on `num_heads` heads of
// each token's row (row stride `row_stride` floats). cos/sin: [num_tokens, head_dim / 2], the
// angle being float(position) * inv_freq[i] computed in fp32 as transformers does.
void apply_rope(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                int64_t row_stride, const float* cos, const float* sin);

// Fills cos/sin [num_tokens, inv_freq.size()] for the given positions.
void rope_tables(std::span<const int64_t> positions, std::span<const float> inv_freq, float* cos,
                 float* sin);

// gate_up: [num_tokens, 2 * dim] (gate then up); out[t, i] = silu(gate[t, i]) * up[t, i].
void silu_mul(const float* gate_up, float* out, int64_t num_tokens, int64_t dim, CpuThreadPool* pool = nullptr);

}  // namespace optimate::cpu
