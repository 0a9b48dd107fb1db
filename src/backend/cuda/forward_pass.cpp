// The launch sequence of one forward step. Every pointer and launch shape here depends only on
// the step's counts, never on host data, so a uniform decode step can be captured once per
// batch size and replayed.
//
// Steps of at most fused_decode_max_rows tokens (decode) take the fused path: per layer the QKV GEMV
// normalises the residual stream itself and rotates q/k and writes the KV cache in its
// epilogue, the o and down GEMVs add into the residual stream, and the gate/up GEMV applies
// SiLU*mul, so a layer is four weight-streaming launches plus attention instead of eleven.
// Wider steps take the GEMM path: per layer RMSNorm, the QKV GEMM, RoPE with the KV write,
// attention, the o GEMM, RMSNorm, the gate/up GEMM, SiLU*mul, the down GEMM; with FP8 weights
// the RMSNorms and SiLU*mul hand their linear e4m3 rows directly. A dense MLP there runs in
// chunks of at most mlp_chunk_rows rows, in buffers that share the logits' memory
// (runner_state.h). Qwen3's per-head q/k norms run before the rotation (on both paths the QKV
// projection then stores its rows), and a mixture of experts replaces the MLP's projections on
// both paths (moe_layer.h), over the whole step.
//
// A tensor-parallel rank (State::tp) runs the same sequence over its heads and MLP features, and
// meets the other ranks at four places, each a collective enqueued on the stream (so a graph
// captures it where the communicator allows): the embedding (each token's row from the rank
// holding it, zeros elsewhere, all-reduced), the o and down projections (each rank's fp32 part,
// all-reduced, then rounded into the residual stream as one GPU's projection output is), and the
// LM head (each rank's vocabulary slice, all-gathered, so every rank holds the whole rows).
#include <algorithm>
#include <cmath>

#include "backend/cuda/activation.h"
#include "backend/cuda/argmax.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_communicator.h"
#include "backend/cuda/embedding.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kv_cache_write.h"
#include "backend/cuda/moe_layer.h"
#include "backend/cuda/paged_attention.h"
#include "backend/cuda/prefill_attention.h"
#include "backend/cuda/qk_norm.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/rope.h"
#include "backend/cuda/rope_kv_write.h"
#include "backend/cuda/runner_state.h"
#include "backend/cuda/tp_residual.h"
#include "model/fp8_quant.h"

namespace optimate::cuda {

KvArena CudaModelRunner::State::kv_arena(int64_t layer) const {
  const int64_t arena_bytes = kv_shape.num_blocks * kv_shape.layout.slot_bytes;
  uint8_t* k = kv_cache.get() + 2 * layer * arena_bytes;
  const kv::KvLayout& layout = kv_shape.layout;
  const int uniform = kv_quantized && !layout.dynamic() ? kv::precision_code(layout.base) : -1;
  return {k, k + arena_bytes, layout.slot_bytes, kv_quantized, uniform};
}

int CudaModelRunner::State::decode_splits(int64_t num_rows, int64_t max_ctx) const {
  const int splits = paged_attention_num_splits(num_rows, attn_shape, max_ctx, num_sms);
  return num_rows <= attn_workspace_rows ? splits : 1;
}

void CudaModelRunner::State::enqueue_forward(const StepInputs& in, int num_splits) {
  const ModelConfig& c = config;
  const int64_t T = in.num_tokens, H = c.hidden_size, D = c.head_dim;
  const int64_t q_dim = c.num_heads * D, kv_dim = c.num_kv_heads * D;
  const int64_t qkv_dim = q_dim + 2 * kv_dim, inter = c.intermediate_size;
  const int32_t* meta = step.get();
  const int32_t* token_ids = meta + layout.token_ids;
  const int32_t* positions = meta + layout.positions;
  const int32_t* slots = meta + layout.slot_mapping;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  cudaStream_t s = stream;

  PagedAttentionParams dec;
  dec.q = qkv.get();
  dec.q_row_stride = qkv_dim;
  dec.rows = meta + layout.rows;
  dec.row_seq = meta + layout.row_seq;
  dec.row_ctx = meta + layout.row_ctx;
  dec.block_tables = meta + layout.block_tables;
  dec.max_blocks_per_seq = limits.max_blocks_per_seq;
  dec.out = attn.get();
  dec.out_row_stride = q_dim;
  dec.workspace = attn_workspace.get();
  dec.split_counters = attn_split_counters.get();
  dec.num_rows = in.num_rows;
  dec.num_heads = c.num_heads;
  dec.num_kv_heads = c.num_kv_heads;
  dec.head_dim = D;
  dec.block_size = kv_shape.block_size;
  dec.num_splits = num_splits;
  dec.scale = scale;
  dec.kernel = attn_shape.kernel;
  // Prefill chunks go to tiles, so every attention row is one new token over older keys.
  dec.prior_keys_stable = limits.tensor_core_prefill;

  PrefillAttentionParams pre;
  pre.q = qkv.get();
  pre.q_row_stride = qkv_dim;
  pre.tiles = meta + layout.tiles;
  pre.block_tables = meta + layout.block_tables;
  pre.max_blocks_per_seq = limits.max_blocks_per_seq;
  pre.out = attn.get();
  pre.out_row_stride = q_dim;
  pre.num_tiles = in.num_tiles;
  pre.num_heads = c.num_heads;
  pre.num_kv_heads = c.num_kv_heads;
  pre.head_dim = D;
  pre.block_size = kv_shape.block_size;
  pre.scale = scale;

  const bool fused = options.fused_decode && T >= 1 && T <= std::min(kGemvMaxRows, options.fused_decode_max_rows) && H % 8 == 0 &&
                     q_dim % 8 == 0 && inter % 8 == 0 && T * H * 2 <= 200 * 1024;
  GemvParams qkv_p, o_p, gate_up_p, down_p;
  qkv_p.input = gate_up_p.input = GemvInput::kRmsNorm;
  qkv_p.residual_in = gate_up_p.residual_in = residual.get();
  qkv_p.eps = gate_up_p.eps = c.rms_norm_eps;
  qkv_p.m = o_p.m = gate_up_p.m = down_p.m = T;
  // Qwen3 normalizes q and k per head before rotating them: its QKV GEMV stores, and the norm,
  // the rotation and the KV write follow as in the GEMM path.
  qkv_p.epilogue = c.qk_norm ? GemvEpilogue::kStoreBf16 : GemvEpilogue::kRopeKvWrite;
  qkv_p.n = qkv_dim;
  qkv_p.k = H;
  qkv_p.y = qkv.get();
  qkv_p.positions = positions;
  qkv_p.inv_freq = inv_freq.get();
  qkv_p.slot_mapping = slots;
  qkv_p.num_heads = c.num_heads;
  qkv_p.num_kv_heads = c.num_kv_heads;
  qkv_p.head_dim = D;
  qkv_p.block_size = kv_shape.block_size;
  qkv_p.kv_row_counters = kv_row_counters.get();
  o_p.epilogue = down_p.epilogue = GemvEpilogue::kAddResidual;
  o_p.residual_out = down_p.residual_out = residual.get();
  o_p.x = attn.get();
  o_p.n = H;
  o_p.k = q_dim;
  gate_up_p.epilogue = GemvEpilogue::kSiluMul;
  gate_up_p.n = 2 * inter;
  gate_up_p.k = H;
  gate_up_p.y = act.get();
  down_p.x = act.get();
  down_p.n = H;
  down_p.k = inter;

  // The o and down projections are row-parallel: one GPU adds the output to the residual stream
  // (in the GEMV's epilogue, or through `branch` into the next norm); a rank sums its fp32 part
  // with the others' first (row_parallel_linear below for the GEMM path).
  auto row_parallel_gemv = [&](const GemvParams& p) {
    if (!tp.comm) return gemv(p, s);
    GemvParams part = p;
    part.epilogue = GemvEpilogue::kStoreF32;
    part.y = partial.get();
    part.residual_out = nullptr;
    gemv(part, s);
    all_reduce(partial.get(), T * H);
    add_rounded_to_residual(partial.get(), residual.get(), T * H, s);
  };

  // q/k norms (Qwen3), then rotary embedding and the KV write, on the stored QKV rows.
  const bool rope_kv_fused = options.fused_elementwise && rope_kv_write_fits(D, qkv_dim);
  auto norm_rope_kv_write = [&](const CudaLayerWeights& w, const KvArena& cache) {
    if (w.q_norm) qk_norm(qkv.get(), qkv_dim, w.q_norm, w.k_norm, T, c.num_heads, c.num_kv_heads, D, c.rms_norm_eps, s);
    if (rope_kv_fused) {
      rope_kv_write(qkv.get(), qkv_dim, positions, inv_freq.get(), cache, slots, T, c.num_heads, c.num_kv_heads,
                    kv_shape.block_size, D, s);
    } else {
      rope_inplace(qkv.get(), qkv_dim, positions, inv_freq.get(), T, c.num_heads, c.num_kv_heads, D, s);
      kv_cache_write(qkv.get() + q_dim, qkv.get() + q_dim + kv_dim, qkv_dim, cache, slots, T, c.num_kv_heads,
                     kv_shape.block_size, D, s);
    }
  };
  // A mixture of experts' MLP on `normed`: its weighted sum into the residual stream (the fused
  // path) or into `branch` (the GEMM path, whose next norm adds it); a rank's part through the
  // all-reduce first, rounded as a dense projection's is.
  auto moe_mlp = [&](const CudaLayerWeights& w, bool into_residual) {
    MoeCombineParams out;
    if (tp.comm) {
      out.output = MoeCombineOutput::kF32;
      out.out_f32 = partial.get();
    } else if (into_residual) {
      out.output = MoeCombineOutput::kAddResidual;
      out.residual = residual.get();
    } else {
      out.output = MoeCombineOutput::kBf16;
      out.out_bf16 = branch.get();
    }
    enqueue_moe(c, w, normed.get(), T, moe, *gemm, out, s);
    if (!tp.comm) return;
    all_reduce(partial.get(), T * H);
    if (into_residual) add_rounded_to_residual(partial.get(), residual.get(), T * H, s);
    else round_to_bf16(partial.get(), branch.get(), T * H, s);
  };

  auto mark = [&](Stage stage) { timer.mark(stage, s); };
  mark(Stage::kEmbedding);
  embedding_gather(weights.tok_embeddings, token_ids, residual.get(), T, H, vocab_begin, vocab_rows, s);
  all_reduce(residual.get(), T * H);
  for (int64_t l = 0; l < c.num_layers && fused; ++l) {
    const CudaLayerWeights& w = weights.layers[l];
    qkv_p.norm_weight = w.attn_norm;
    qkv_p.w = w.wqkv;
    qkv_p.w_fp8 = w.wqkv_fp8.codes;
    qkv_p.w_scale = w.wqkv_fp8.scales;
    qkv_p.bias = w.bqkv;
    qkv_p.kv_cache = dec.cache = pre.cache = kv_arena(l);
    mark(Stage::kQkv);
    gemv(qkv_p, s);
    if (c.qk_norm) norm_rope_kv_write(w, dec.cache);
    mark(Stage::kAttention);
    if (in.num_rows > 0) paged_attention(dec, s);
    if (in.num_tiles > 0) prefill_attention(pre, s);
    o_p.w = w.wo;
    o_p.w_fp8 = w.wo_fp8.codes;
    o_p.w_scale = w.wo_fp8.scales;
    mark(Stage::kOProj);
    row_parallel_gemv(o_p);
    if (c.is_moe()) {
      mark(Stage::kGateUp);
      rmsnorm_residual(nullptr, residual.get(), w.ffn_norm, normed.get(), nullptr, T, H, c.rms_norm_eps, s);
      moe_mlp(w, /*into_residual=*/true);
      continue;
    }
    gate_up_p.norm_weight = w.ffn_norm;
    gate_up_p.w = w.w_gate_up;
    gate_up_p.w_fp8 = w.w_gate_up_fp8.codes;
    gate_up_p.w_scale = w.w_gate_up_fp8.scales;
    mark(Stage::kGateUp);
    gemv(gate_up_p, s);
    down_p.w = w.w_down;
    down_p.w_fp8 = w.w_down_fp8.codes;
    down_p.w_scale = w.w_down_fp8.scales;
    mark(Stage::kDown);
    row_parallel_gemv(down_p);
  }
  // The GEMM path's elementwise kernels (elementwise_kernels.h): the current ones, or the
  // baseline a benchmark sets against them. With the current ones an FP8 linear that rounds its
  // activations per token takes them straight from the RMSNorm or SiLU*mul before it, written
  // into the FP8 GEMM's activation scratch.
  const ElementwiseKernels kernels =
      options.fused_elementwise ? ElementwiseKernels::kCurrent : ElementwiseKernels::kBaseline;
  auto fp8_input = [&](const Fp8Weight& w, int64_t m, int64_t n, bool row_kernel_fits) {
    return kernels == ElementwiseKernels::kCurrent && w.codes && fp8_rounds_activations(m, n) && row_kernel_fits;
  };
  // A projection of m rows from bf16 or FP8 weights; `quantized`: x is already in the FP8 GEMM's
  // activation scratch.
  auto linear = [&](const __nv_bfloat16* x, const __nv_bfloat16* w_bf16, const Fp8Weight& w_fp8,
                    const __nv_bfloat16* bias, void* y, int64_t m, int64_t n, int64_t k,
                    GemmOutput out = GemmOutput::kBf16, bool quantized = false) {
    if (quantized) fp8_gemm->linear_quantized(w_fp8, bias, y, out, m, n, k, s);
    else if (w_fp8.codes) fp8_gemm->linear(x, w_fp8, bias, y, out, m, n, k, s);
    else gemm->linear(x, w_bf16, bias, y, out, m, n, k, s);
  };
  // Into rows [row0, row0 + m) of `branch`.
  auto row_parallel_linear = [&](const __nv_bfloat16* x, const __nv_bfloat16* w, const Fp8Weight& w_fp8,
                                 int64_t row0, int64_t m, int64_t k, bool quantized = false) {
    __nv_bfloat16* out = branch.get() + row0 * H;
    if (!tp.comm) return linear(x, w, w_fp8, nullptr, out, m, H, k, GemmOutput::kBf16, quantized);
    linear(x, w, w_fp8, nullptr, partial.get(), m, H, k, GemmOutput::kF32, quantized);
    all_reduce(partial.get(), m * H);
    round_to_bf16(partial.get(), out, m * H, s);
  };
  // RMSNorm of rows [row0, row0 + m) into the next linear's input: bf16 rows of `normed`, or
  // e4m3 rows for an FP8 linear (from the scratch's first row).
  auto norm_into = [&](const __nv_bfloat16* x, const __nv_bfloat16* norm_w, int64_t row0, int64_t m, bool fp8) {
    const __nv_bfloat16* xr = x ? x + row0 * H : nullptr;
    float* res = residual.get() + row0 * H;
    if (fp8) rmsnorm_residual_fp8(xr, res, norm_w, fp8_gemm->activations(), m, H, c.rms_norm_eps, s);
    else rmsnorm_residual(xr, res, norm_w, normed.get() + row0 * H, nullptr, m, H, c.rms_norm_eps, s, kernels);
  };
  // A dense MLP's rows in near-equal chunks of at most mlp_chunk_rows (its buffers hold that
  // many); a mixture of experts runs over the whole step (mlp_chunk_rows 0).
  const int64_t chunk_rows = mlp_chunk_rows > 0 ? mlp_chunk_rows : std::max<int64_t>(T, 1);
  const int64_t mlp_chunks = std::max<int64_t>(1, (T + chunk_rows - 1) / chunk_rows);
  const int64_t mlp_rows = std::min(chunk_rows, ((T + mlp_chunks - 1) / mlp_chunks + 15) / 16 * 16);
  for (int64_t l = 0; l < c.num_layers && !fused; ++l) {
    const CudaLayerWeights& w = weights.layers[l];
    const bool qkv_fp8_in = fp8_input(w.wqkv_fp8, T, qkv_dim, rmsnorm_fp8_fits(H));
    mark(Stage::kElementwise);
    norm_into(l == 0 ? nullptr : branch.get(), w.attn_norm, 0, T, qkv_fp8_in);
    mark(Stage::kQkv);
    linear(normed.get(), w.wqkv, w.wqkv_fp8, w.bqkv, qkv.get(), T, qkv_dim, H, GemmOutput::kBf16, qkv_fp8_in);
    mark(Stage::kElementwise);
    dec.cache = pre.cache = kv_arena(l);
    norm_rope_kv_write(w, dec.cache);
    mark(Stage::kAttention);
    if (in.num_rows > 0) paged_attention(dec, s);
    if (in.num_tiles > 0) prefill_attention(pre, s);
    mark(Stage::kOProj);
    row_parallel_linear(attn.get(), w.wo, w.wo_fp8, 0, T, q_dim);
    if (c.is_moe()) {
      mark(Stage::kElementwise);
      norm_into(branch.get(), w.ffn_norm, 0, T, /*fp8=*/false);
      mark(Stage::kGateUp);
      moe_mlp(w, /*into_residual=*/false);
      continue;
    }
    for (int64_t row0 = 0; row0 < T; row0 += mlp_rows) {
      const int64_t m = std::min(mlp_rows, T - row0);
      const bool gate_up_fp8_in = fp8_input(w.w_gate_up_fp8, m, 2 * inter, rmsnorm_fp8_fits(H));
      const bool down_fp8_in = fp8_input(w.w_down_fp8, m, H, silu_mul_fp8_fits(inter));
      mark(Stage::kElementwise);
      norm_into(branch.get(), w.ffn_norm, row0, m, gate_up_fp8_in);
      mark(Stage::kGateUp);
      linear(normed.get() + row0 * H, w.w_gate_up, w.w_gate_up_fp8, nullptr, gate_up.get(), m, 2 * inter, H,
             GemmOutput::kBf16, gate_up_fp8_in);
      mark(Stage::kElementwise);
      if (down_fp8_in) silu_mul_fp8(gate_up.get(), fp8_gemm->activations(), m, inter, s);
      else silu_mul(gate_up.get(), act.get(), m, inter, s, kernels);
      mark(Stage::kDown);
      row_parallel_linear(act.get(), w.w_down, w.w_down_fp8, row0, m, inter, down_fp8_in);
    }
  }
  // Only the rows whose logits are wanted go through the final norm and the vocabulary GEMM;
  // the logits buffer takes max_num_seqs of them (forward() runs the rest in chunks).
  const int64_t R = in.num_logits_rows, first_rows = std::min(R, options.max_num_seqs);
  mark(Stage::kFinalNorm);
  rmsnorm_residual(fused ? nullptr : branch.get(), residual.get(), weights.final_norm, normed.get(),
                   meta + layout.logits_rows, R, H, c.rms_norm_eps, s, kernels);
  mark(Stage::kLmHead);
  enqueue_lm_head(0, first_rows);
  mark(Stage::kArgmax);
  argmax_rows(logits.get(), greedy.get(), first_rows, c.vocab_size, s);
}

void CudaModelRunner::State::enqueue_lm_head(int64_t first, int64_t count) {
  const int64_t H = config.hidden_size, V = config.vocab_size;
  const __nv_bfloat16* x = normed.get() + first * H;
  if (!tp.comm) {
    gemm->linear(x, weights.lm_head, nullptr, logits.get(), GemmOutput::kF32, count, V, H, stream);
    return;
  }
  // Every rank's slice padded to one stride (the last rank's is shorter), gathered in rank order
  // as [ranks, count, stride], then spread into the rows' columns. Every rank has the same count.
  if (count == 0) return;
  const parallel::TpPartition& p = tp.partition;
  const int64_t stride = p.vocab_per_rank;
  const size_t f = sizeof(float);
  if (vocab_rows == stride) {
    gemm->linear(x, weights.lm_head, nullptr, rank_logits.get(), GemmOutput::kF32, count, stride, H, stream);
  } else {
    // `logits` is free until the gather fills it: the shorter slice goes there first.
    gemm->linear(x, weights.lm_head, nullptr, logits.get(), GemmOutput::kF32, count, vocab_rows, H, stream);
    OPTIMATE_CUDA_CHECK(cudaMemcpy2DAsync(rank_logits.get(), stride * f, logits.get(), vocab_rows * f, vocab_rows * f,
                                          count, cudaMemcpyDeviceToDevice, stream));
  }
  timer.mark(Stage::kCollective, stream);
  tp.comm->all_gather_async(rank_logits.get(), gathered_logits.get(), static_cast<size_t>(count * stride), stream);
  for (int r = 0; r < p.num_ranks; ++r) {
    const int64_t v0 = p.vocab_begin(r), n = p.vocab_end(r) - v0;
    OPTIMATE_CUDA_CHECK(cudaMemcpy2DAsync(logits.get() + v0, V * f, gathered_logits.get() + r * count * stride,
                                          stride * f, n * f, count, cudaMemcpyDeviceToDevice, stream));
  }
}

void CudaModelRunner::State::all_reduce(float* data, int64_t count) {
  if (!tp.comm) return;
  timer.mark(Stage::kCollective, stream);
  tp.comm->all_reduce_sum_async(data, static_cast<size_t>(count), stream);
}

bool CudaModelRunner::State::graphs_allowed() const {
  return options.cuda_graphs && (!tp.comm || tp.comm->graph_capturable());
}

}  // namespace optimate::cuda
