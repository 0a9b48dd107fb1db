#include "backend/cpu/cpu_model_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include <omp.h>

#include "backend/cpu/q8_linear.h"
#include "backend/cpu/q8_weight_row.h"  // has_q8_kernel
#include "core/error.h"

namespace optimate::cpu {
namespace {

template <typename T>
void grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// memcpy bandwidth between two buffers already in memory: the CPU backend's host link.
double measure_memcpy_bytes_per_s() {
  constexpr size_t kBytes = size_t{16} << 20;
  std::vector<uint8_t> a(kBytes, 1), b(kBytes, 2);
  double best_s = 1e9;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), kBytes);
    best_s = std::min(best_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return static_cast<double>(kBytes) / std::max(best_s, 1e-9);
}

}  // namespace

CpuModelRunner::CpuModelRunner(const ModelConfig& config, const ModelWeights& weights,
                               const CpuRunnerOptions& options)
    : CpuModelRunner(config, weights, options, CpuTpRank{}) {}

CpuModelRunner::CpuModelRunner(const ModelConfig& config, const ModelWeights& weights,
                               const CpuRunnerOptions& options, const CpuTpRank& tp)
    : config_(config), tp_(tp) {
  config_.validate(config_.architecture_name.empty() ? "model config" : config_.architecture_name);
  int64_t vocab_rows = config_.vocab_size;
  if (tp_.comm) {
    const parallel::TpPartition& p = tp_.partition;
    if (p.num_ranks != tp_.comm->size() || p.vocab_size != config_.vocab_size ||
        p.heads_per_rank != config_.num_heads || p.kv_heads_per_rank != config_.num_kv_heads)
      fail(ErrorCode::kInternal, "rank {}: the partition does not match the rank's model configuration",
           tp_.comm->rank());
    vocab_rows = p.vocab_end(tp_.comm->rank()) - p.vocab_begin(tp_.comm->rank());
  }
  if (options.num_kv_blocks < 1)
    fail(ErrorCode::kInvalidArgument, "num_kv_blocks must be at least 1, got {}", options.num_kv_blocks);
  if (options.block_size < 1)
    fail(ErrorCode::kInvalidArgument, "block_size must be at least 1, got {}", options.block_size);
  if (config_.head_dim % 2 != 0)
    fail(ErrorCode::kUnsupported, "head_dim {} is odd; rotary embedding needs an even head_dim",
         config_.head_dim);

  check_cpu_floor();
  if (options.isa && !cpu_supports(*options.isa))
    fail(ErrorCode::kUnsupported, "this processor cannot run the {} kernels ({})", cpu_isa_name(*options.isa),
         describe_cpu_features());
  activations_ = options.activations;
  isa_ = options.isa.value_or(best_cpu_isa());
  built_isa_ = isa_;
  num_threads_ = options.num_threads > 0 ? options.num_threads : omp_get_max_threads();
  if (options.max_step_tokens < 0)
    fail(ErrorCode::kInvalidArgument, "max_step_tokens must be >= 0, got {}", options.max_step_tokens);
  max_step_tokens_ = options.max_step_tokens;
  pool_ = std::make_unique<CpuThreadPool>(num_threads_);
  use_single_threaded_blas();

  if (options.host_tier.swap < 0 || options.host_tier.prefix < 0)
    fail(ErrorCode::kInvalidArgument, "host tier slots must be >= 0, got {} + {}", options.host_tier.swap,
         options.host_tier.prefix);
  kv_shape_ = {.num_layers = config_.num_layers,
               .num_blocks = options.num_kv_blocks,
               .block_size = options.block_size,
               .num_kv_heads = config_.num_kv_heads,
               .head_dim = config_.head_dim,
               .layout = plan_layout(config_, options),
               .host_tier = options.host_tier,
               .free_order = kv::FreeSpaceOrder::kFreedFirst};
  attn_dims_ = {.num_heads = config_.num_heads,
                .num_kv_heads = config_.num_kv_heads,
                .head_dim = config_.head_dim,
                .block_size = options.block_size,
                .num_blocks = options.num_kv_blocks};

  const KeepQuantized keep = !options.keep_quantized ? nullptr
                             : activations_ == CpuActivations::kQ8 ? has_q8_kernel
                                                                   : keeps_quantized;
  weights_ = pack_cpu_weights(config_, weights, keep, activations_ == CpuActivations::kQ8, vocab_rows);
  if (options.quantization == WeightQuantization::kFp8) {
    // Per-row scales of a rank's column slice would not be the whole model's.
    if (tp_.comm)
      fail(ErrorCode::kUnsupported, "--quantization fp8 on the CPU backend runs a whole model, not "
           "--tensor-parallel-size {}", tp_.comm->size());
    for (CpuLayerWeights& l : weights_.layers) {
      for (CpuMatrix* m : {&l.wqkv, &l.wo}) quantize_matrix_fp8(*m);
      if (l.experts.empty()) {
        quantize_matrix_fp8(l.w_gate_up);
        quantize_matrix_fp8(l.w_down);
      }
      for (CpuExpert& e : l.experts) {  // the router stays fp32, as on the GPU
        quantize_matrix_fp8(e.w_gate_up);
        quantize_matrix_fp8(e.w_down);
      }
    }
  }
  inv_freq_ = rope_inv_freq(config_);
  OPTIMATE_CHECK(static_cast<int64_t>(inv_freq_.size()) == config_.head_dim / 2,
                 "rope_inv_freq returned {} entries for head_dim {}", inv_freq_.size(), config_.head_dim);

  const size_t arena_bytes = static_cast<size_t>(options.num_kv_blocks * kv_shape_.layout.slot_bytes);
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    k_cache_.push_back(std::make_unique_for_overwrite<uint8_t[]>(arena_bytes));
    v_cache_.push_back(std::make_unique_for_overwrite<uint8_t[]>(arena_bytes));
  }
  kv_formats_ = KvArenas::formats_for(kv_shape_.layout, attn_dims_);
  if (kv_shape_.num_host_slots() > 0) {
    host_cache_ = std::make_unique_for_overwrite<uint8_t[]>(
        static_cast<size_t>(2 * config_.num_layers * kv_shape_.num_host_slots() * kv_shape_.layout.slot_bytes));
    host_link_bytes_per_s_ = measure_memcpy_bytes_per_s();
  }
}

std::vector<KernelFamily> CpuModelRunner::kernel_families() const {
  const std::vector<CpuIsa> isas = supported_cpu_isas();
  if (activations_ != CpuActivations::kQ8 || isas.size() < 2) return {};
  KernelFamily f{"q8_kernel", {}, std::string(cpu_isa_name(built_isa_))};
  for (CpuIsa isa : isas) f.variants.emplace_back(cpu_isa_name(isa));
  return {f};
}

void CpuModelRunner::set_kernel_variant(std::string_view family, std::string_view variant) {
  if (family != "q8_kernel" || kernel_families().empty()) return ModelRunner::set_kernel_variant(family, variant);
  isa_ = parse_cpu_isa(variant);
}

void CpuModelRunner::copy_kv(std::span<const kv::KvCopy> copies) {
  kv::check_copies(copies, kv_shape_.num_blocks, kv_shape_.num_host_slots());
  const int64_t sb = kv_shape_.layout.slot_bytes;
  for (const kv::KvCopy& c : copies) {
    const size_t bytes = static_cast<size_t>(c.num_slots * sb);
    for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
      uint8_t* device[2] = {k_cache_[layer].get(), v_cache_[layer].get()};
      for (int kv = 0; kv < 2; ++kv) {
        uint8_t* host = host_cache_.get() + ((2 * layer + kv) * kv_shape_.num_host_slots() + c.host_slot) * sb;
        uint8_t* dev = device[kv] + c.device_slot * sb;
        if (c.direction == kv::CopyDirection::kToHost) std::memcpy(host, dev, bytes);
        else std::memcpy(dev, host, bytes);
      }
    }
  }
}

kv::KvLayout CpuModelRunner::plan_layout(const ModelConfig& config, const CpuRunnerOptions& options) {
  // bf16 is the full precision of a bf16 cache (and of a dynamic cache started in bf16); f32
  // otherwise.
  const kv::KvPrecision full =
      options.kv_precision == kv::KvPrecision::kBF16 ? kv::KvPrecision::kBF16 : kv::KvPrecision::kF32;
  return kv::plan_kv_layout(full, options.kv_precision, options.kv_finest, config.num_kv_heads,
                            options.block_size, config.head_dim, options.kv_int4_keys);
}

KvArenas CpuModelRunner::arenas(int64_t layer) const {
  return {k_cache_[layer].get(), v_cache_[layer].get(), kv_shape_.layout.slot_bytes, kv_formats_};
}

void CpuModelRunner::requantize(std::span<const RequantizeOp> ops) {
  for (const RequantizeOp& op : ops) {
    for (const int32_t e : {op.from_entry, op.to_entry})
      if (e < 0 || kv::entry_slot(e) >= kv_shape_.num_blocks)
        fail(ErrorCode::kInvalidArgument, "requantize: slot {} outside the cache of {}", kv::entry_slot(e),
             kv_shape_.num_blocks);
    for (int64_t layer = 0; layer < config_.num_layers; ++layer)
      requantize_block(arenas(layer), op.from_entry, op.to_entry, attn_dims_, requantize_rows_);
  }
}

void CpuModelRunner::check_batch(const ForwardBatch& batch) const {
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const SeqSlice& s = batch.seqs[i];
    const int64_t n = static_cast<int64_t>(s.token_ids.size());
    if (n == 0) fail(ErrorCode::kInvalidArgument, "batch slice {} has no tokens", i);
    if (s.start_pos < 0)
      fail(ErrorCode::kInvalidArgument, "batch slice {} starts at negative position {}", i, s.start_pos);
    for (int32_t t : s.token_ids)
      if (t < 0 || t >= config_.vocab_size)
        fail(ErrorCode::kInvalidArgument, "batch slice {}: token id {} outside the vocabulary of {}",
             i, t, config_.vocab_size);
    const int64_t blocks_needed = (s.start_pos + n + kv_shape_.block_size - 1) / kv_shape_.block_size;
    if (static_cast<int64_t>(s.block_table.size()) < blocks_needed)
      fail(ErrorCode::kInvalidArgument,
           "batch slice {}: block table has {} blocks, positions up to {} need {}", i,
           s.block_table.size(), s.start_pos + n - 1, blocks_needed);
    for (int64_t b = 0; b < blocks_needed; ++b) {
      const int32_t e = s.block_table[b];
      if (e < 0 || kv::entry_slot(e) >= kv_shape_.num_blocks)
        fail(ErrorCode::kInvalidArgument, "batch slice {}: block entry {:#x} outside the cache of {} slots",
             i, e, kv_shape_.num_blocks);
      const int32_t code = kv::entry_code(e);
      if (code >= 4 || !kv_formats_.k[code])
        fail(ErrorCode::kInvalidArgument, "batch slice {}: block entry {:#x} names a precision this "
             "cache does not hold", i, e);
    }
  }
}

void CpuModelRunner::prepare(const ForwardBatch& batch) {
  s_.positions.clear();
  s_.logit_rows.clear();
  s_.seqs.clear();
  int64_t row = 0;
  for (const SeqSlice& slice : batch.seqs) {
    const int64_t n = static_cast<int64_t>(slice.token_ids.size());
    s_.seqs.push_back({.first_row = row, .num_tokens = n, .start_pos = slice.start_pos,
                       .block_table = slice.block_table});
    for (int64_t i = 0; i < n; ++i) s_.positions.push_back(slice.start_pos + i);
    if (slice.all_logits)
      for (int64_t i = 0; i < n; ++i) s_.logit_rows.push_back(row + i);
    else if (slice.want_logits)
      s_.logit_rows.push_back(row + n - 1);
    row += n;
  }
  const int64_t t = row;
  const int64_t hidden = config_.hidden_size;
  const int64_t q_dim = config_.num_heads * config_.head_dim;
  const int64_t kv_dim = config_.num_kv_heads * config_.head_dim;
  grow(s_.x, t * hidden);
  grow(s_.h, t * hidden);
  grow(s_.qkv, t * (q_dim + 2 * kv_dim));
  grow(s_.attn, t * q_dim);
  if (config_.is_moe()) {
    grow(s_.partial, t * hidden);  // the experts' weighted sum
  } else {
    grow(s_.gate_up, t * 2 * config_.intermediate_size);
    grow(s_.act, t * config_.intermediate_size);
  }
  grow(s_.rope_cos, t * config_.head_dim / 2);
  grow(s_.rope_sin, t * config_.head_dim / 2);
  grow(s_.last, static_cast<int64_t>(s_.logit_rows.size()) * hidden);
  if (tp_.comm) {
    const int64_t rows = static_cast<int64_t>(s_.logit_rows.size()), stride = tp_.partition.vocab_per_rank;
    grow(s_.partial, t * hidden);
    grow(s_.rank_logits, rows * stride);
    grow(s_.gathered, tp_.comm->size() * rows * stride);
  }
}

void CpuModelRunner::matmul(const float* x, const CpuMatrix& w, float* y, int64_t t, bool accumulate) {
  if (!w.fp8_scales.empty())
    fp8_linear(x, w, y, t, accumulate, num_threads_, s_.fp8);
  else if (!w.q8.empty())
    q8_linear(x, w.q8, y, t, accumulate, *pool_, isa_, s_.q8);
  else
    linear(x, w, y, t, accumulate, num_threads_);
}

void CpuModelRunner::add_projection(const float* in, const CpuMatrix& w, int64_t t) {
  if (!tp_.comm) {
    matmul(in, w, s_.x.data(), t, /*accumulate=*/true);
    return;
  }
  matmul(in, w, s_.partial.data(), t, false);
  add_partial(t);
}

void CpuModelRunner::add_partial(int64_t t) {
  const int64_t n = t * config_.hidden_size;
  if (tp_.comm) tp_.comm->all_reduce_sum(std::span(s_.partial.data(), static_cast<size_t>(n)));
  float* x = s_.x.data();
  const float* p = s_.partial.data();
  for (int64_t i = 0; i < n; ++i) x[i] += p[i];
}

void CpuModelRunner::embed(const ForwardBatch& batch) {
  const int64_t hidden = config_.hidden_size;
  const int64_t v0 = tp_.comm ? tp_.partition.vocab_begin(tp_.comm->rank()) : 0;
  const int64_t v1 = tp_.comm ? tp_.partition.vocab_end(tp_.comm->rank()) : config_.vocab_size;
  float* row = s_.x.data();
  int64_t t = 0;
  for (const SeqSlice& slice : batch.seqs)
    for (int32_t id : slice.token_ids) {
      // A split vocabulary: the rank holding the token's row gives it, the others zeros.
      if (id >= v0 && id < v1) weights_.embedding_row(id - v0, row);
      else std::fill_n(row, hidden, 0.0f);
      row += hidden;
      ++t;
    }
  if (tp_.comm) tp_.comm->all_reduce_sum(std::span(s_.x.data(), static_cast<size_t>(t * hidden)));
}

void CpuModelRunner::lm_head(float* logits, int64_t rows) {
  if (!tp_.comm) {
    matmul(s_.last.data(), weights_.lm_head_matrix(), logits, rows, false);
    return;
  }
  // Each rank's rows of the vocabulary, padded to one stride, gathered in rank order.
  const parallel::TpPartition& p = tp_.partition;
  const int64_t stride = p.vocab_per_rank, vocab = config_.vocab_size, ranks = p.num_ranks;
  const int64_t mine = weights_.lm_head_matrix().rows;
  float* local = s_.rank_logits.data();
  matmul(s_.last.data(), weights_.lm_head_matrix(), local, rows, false);
  // matmul wrote [rows, mine]; spread the rows to the stride from the last one back.
  for (int64_t r = rows - 1; r >= 0; --r) {
    std::copy_backward(local + r * mine, local + (r + 1) * mine, local + r * stride + mine);
    std::fill(local + r * stride + mine, local + (r + 1) * stride, 0.0f);
  }
  tp_.comm->all_gather(std::span<const float>(local, static_cast<size_t>(rows * stride)),
                       std::span(s_.gathered.data(), static_cast<size_t>(ranks * rows * stride)));
  for (int64_t k = 0; k < ranks; ++k) {
    const int64_t v0 = p.vocab_begin(static_cast<int>(k)), n = p.vocab_end(static_cast<int>(k)) - v0;
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(s_.gathered.data() + (k * rows + r) * stride, n, logits + r * vocab + v0);
  }
}

void CpuModelRunner::run_layer(int64_t layer, int64_t t) {
  const CpuLayerWeights& w = weights_.layers[layer];
  const int64_t hidden = config_.hidden_size;
  const int64_t hd = config_.head_dim;
  const int64_t q_dim = config_.num_heads * hd;
  const int64_t kv_dim = config_.num_kv_heads * hd;
  const int64_t qkv_dim = q_dim + 2 * kv_dim;
  const int64_t inter = config_.intermediate_size;
  float* qkv = s_.qkv.data();

  rms_norm(s_.x.data(), w.attn_norm.data(), s_.h.data(), t, hidden, config_.rms_norm_eps, pool_.get());
  matmul(s_.h.data(), w.wqkv, qkv, t, false);
  if (!w.bqkv.empty()) add_bias(qkv, w.bqkv.data(), t, qkv_dim);
  if (!w.q_norm.empty()) {  // each head of each token's q, then of its k, in place
    for (int64_t i = 0; i < t; ++i) {
      float* row = qkv + i * qkv_dim;
      rms_norm(row, w.q_norm.data(), row, config_.num_heads, hd, config_.rms_norm_eps);
      rms_norm(row + q_dim, w.k_norm.data(), row + q_dim, config_.num_kv_heads, hd, config_.rms_norm_eps);
    }
  }
  apply_rope(qkv, t, config_.num_heads, hd, qkv_dim, s_.rope_cos.data(), s_.rope_sin.data());
  apply_rope(qkv + q_dim, t, config_.num_kv_heads, hd, qkv_dim, s_.rope_cos.data(), s_.rope_sin.data());
  const KvArenas cache = arenas(layer);
  write_kv(qkv + q_dim, qkv + q_dim + kv_dim, qkv_dim, cache, s_.seqs, attn_dims_);
  paged_attention(qkv, qkv_dim, cache, s_.attn.data(), s_.seqs, attn_dims_,
                  1.0f / std::sqrt(static_cast<float>(hd)), *pool_, s_.attention);
  add_projection(s_.attn.data(), w.wo, t);

  rms_norm(s_.x.data(), w.ffn_norm.data(), s_.h.data(), t, hidden, config_.rms_norm_eps, pool_.get());
  if (config_.is_moe()) {
    // FP8 experts keep their activations at every width, as the GPU's grouped GEMMs do.
    const MoeContext ctx{.pool = pool_.get(), .isa = isa_, .matmul = [this](const float* x, const CpuMatrix& m,
                                                                            float* y, int64_t rows) {
                           if (!m.fp8_scales.empty()) fp8_linear(x, m, y, rows, false, num_threads_, s_.fp8, false);
                           else matmul(x, m, y, rows, false);
                         }};
    moe_mlp(s_.h.data(), w, config_.moe, hidden, t, s_.partial.data(), ctx, s_.moe);
    add_partial(t);
    return;
  }
  matmul(s_.h.data(), w.w_gate_up, s_.gate_up.data(), t, false);
  silu_mul(s_.gate_up.data(), s_.act.data(), t, inter, pool_.get());
  add_projection(s_.act.data(), w.w_down, t);
}

void CpuModelRunner::forward(const ForwardBatch& batch, std::vector<float>& logits) {
  check_batch(batch);
  int64_t tokens = 0, rows = 0;
  for (const SeqSlice& s : batch.seqs) {
    const int64_t n = static_cast<int64_t>(s.token_ids.size());
    tokens += n;
    rows += s.all_logits ? n : s.want_logits ? 1 : 0;
  }
  logits.resize(static_cast<size_t>(rows * config_.vocab_size));
  if (max_step_tokens_ == 0 || tokens <= max_step_tokens_) return run_part(batch, logits.data());
  float* out = logits.data();
  for (const ForwardBatch& part : split_batch(batch, max_step_tokens_)) {
    run_part(part, out);
    out += static_cast<int64_t>(s_.logit_rows.size()) * config_.vocab_size;
  }
}

void CpuModelRunner::run_part(const ForwardBatch& batch, float* logits) {
  prepare(batch);
  const int64_t t = static_cast<int64_t>(s_.positions.size());
  const int64_t hidden = config_.hidden_size;
  const int64_t num_logit_rows = static_cast<int64_t>(s_.logit_rows.size());
  if (t == 0) return;

  rope_tables(s_.positions, inv_freq_, s_.rope_cos.data(), s_.rope_sin.data());
  embed(batch);

  for (int64_t layer = 0; layer < config_.num_layers; ++layer) run_layer(layer, t);

  if (num_logit_rows == 0) return;
  for (int64_t r = 0; r < num_logit_rows; ++r)
    rms_norm(s_.x.data() + s_.logit_rows[r] * hidden, weights_.final_norm.data(),
             s_.last.data() + r * hidden, 1, hidden, config_.rms_norm_eps);
  lm_head(logits, num_logit_rows);
}

}  // namespace optimate::cpu
