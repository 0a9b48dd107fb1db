// The CPU backend: a multi-threaded fp32 forward pass of a Llama-family decoder
// (Llama 2/3, SmolLM2, Mistral, Qwen2, Qwen3; mixtures of experts: Qwen3-MoE, Mixtral, moe_mlp.h)
// over the paged KV cache of backend/model_runner.h.
//
// One forward() call runs every token of the batch (prefill chunks and decodes mixed) through
// each layer together: the token rows share the GEMMs (by default integer kernels over the
// file's quantized weights with the activations quantized to 8 bits, q8_linear.h; with
// CpuActivations::kF32 the fp32 reference path of cpu_ops.h), and
// attention runs per (token, kv head) on OpenMP threads, reading K/V through block tables.
// Scratch buffers only grow, so steady-state decoding allocates nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/paged_attention.h"
#include "backend/cpu/cpu_weights.h"
#include "backend/cpu/fp8_linear.h"
#include "backend/cpu/micro_batches.h"
#include "backend/cpu/moe_mlp.h"
#include "backend/cpu/q8_activations.h"
#include "core/setting_choices.h"  // CpuActivations
#include "model/fp8_quant.h"
#include "runner/model_runner.h"
#include "model/weights.h"
#include "parallel/communicator.h"
#include "parallel/tp_partition.h"

namespace optimate::cpu {

struct CpuRunnerOptions {
  int64_t num_kv_blocks = 0;  // KV cache capacity in slots (required; kv/kv_layout.h)
  kv::HostTierSlots host_tier; // the host tier's regions (a second set of arenas; kv/host_tier.h)
  int64_t block_size = 16;    // tokens per block
  // The cache's precision (f32, bf16, or fp8/int8/int4 for a static quantized cache) and, for
  // a cache the kv_quant optimizer may requantize, the finest precision it may use.
  kv::KvPrecision kv_precision = kv::KvPrecision::kF32;
  std::optional<kv::KvPrecision> kv_finest;
  kv::Int4Keys kv_int4_keys = kv::Int4Keys::kPerToken;  // how its int4 blocks scale their keys
  int num_threads = 0;        // 0: OpenMP's default (all cores)
  // Q8_0/Q4_1 matrices stay quantized (a quarter or less of the fp32 bytes per step); false
  // widens every weight to fp32 at load, the reference path.
  bool keep_quantized = true;
  // kQ8 also keeps Q4_0 and the K-quants (Q4_K, Q5_K, Q6_K) as stored.
  CpuActivations activations = CpuActivations::kQ8;
  // Instruction set of the integer kernels; empty: the best this processor runs.
  std::optional<CpuIsa> isa;
  // kFp8: the linear projections (not the embedding or LM head) as the GPU's FP8 weights
  // compute them (fp8_linear.h). A whole model only, not a tensor-parallel rank.
  WeightQuantization quantization = WeightQuantization::kNone;
  // Tokens a forward pass runs at once: a larger batch runs in parts of at most this many, one
  // after the other (micro_batches.h), so the activation scratch holds one part. 0: no limit.
  int64_t max_step_tokens = kCpuMicroBatchTokens;
};

// One rank of a model split by tensor parallelism (parallel/tp_partition.h): the runner is built
// from the rank's configuration and weights (parallel/weight_shard.h) and meets its peers through
// `comm` for the embedding, after the o and down projections, and for the logits.
struct CpuTpRank {
  parallel::Communicator* comm = nullptr;
  parallel::TpPartition partition;
};

class CpuModelRunner final : public ModelRunner {
 public:
  CpuModelRunner(const ModelConfig& config, const ModelWeights& weights,
                 const CpuRunnerOptions& options);
  // Rank comm->rank() of a split model: `config` is rank_model_config's (the rank's heads, the
  // whole vocabulary), `weights` the rank's shard.
  CpuModelRunner(const ModelConfig& config, const ModelWeights& weights, const CpuRunnerOptions& options,
                 const CpuTpRank& tp);

  const ModelConfig& config() const override { return config_; }
  const KvCacheShape& kv_shape() const override { return kv_shape_; }
  void requantize(std::span<const RequantizeOp> ops) override;
  // memcpy between the arenas and the host tier's, every layer's K and V.
  void copy_kv(std::span<const kv::KvCopy> copies) override;
  double host_link_bytes_per_s() const override { return host_link_bytes_per_s_; }
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;

  int num_threads() const { return num_threads_; }
  CpuActivations activations() const { return activations_; }
  CpuIsa isa() const { return isa_; }
  // q8_kernel (q8 activations on a processor with more than one instruction set): the
  // instruction set the runner was built with is the stable variant.
  std::vector<KernelFamily> kernel_families() const override;
  void set_kernel_variant(std::string_view family, std::string_view variant) override;
  int64_t weight_bytes() const override { return weights_.bytes(); }
  // The KV layout these options give (a function of the model's shape and the precisions).
  static kv::KvLayout plan_layout(const ModelConfig& config, const CpuRunnerOptions& options);

 private:
  struct Scratch {
    std::vector<float> x;         // (tokens, hidden) residual stream
    std::vector<float> h;         // (tokens, hidden) normed input of a block
    std::vector<float> qkv;       // (tokens, q_dim + 2 * kv_dim)
    std::vector<float> attn;      // (tokens, q_dim)
    std::vector<float> gate_up;   // (tokens, 2 * intermediate)
    std::vector<float> act;       // (tokens, intermediate)
    std::vector<float> rope_cos;  // (tokens, head_dim / 2)
    std::vector<float> rope_sin;  // (tokens, head_dim / 2)
    std::vector<float> last;      // (logit rows, hidden)
    std::vector<float> partial;   // (tokens, hidden) a split projection's part before the all-reduce; the MoE output
    std::vector<float> rank_logits;  // (logit rows, vocab_per_rank) this rank's vocabulary rows, padded
    std::vector<float> gathered;  // (ranks, logit rows, vocab_per_rank)
    std::vector<int64_t> positions;
    std::vector<int64_t> logit_rows;
    std::vector<AttentionSeq> seqs;
    AttentionScratch attention;
    Q8Activations q8;  // the current product's quantized input
    Fp8Scratch fp8;    // an FP8 product's activations and sums
    MoeScratch moe;    // a mixture-of-experts MLP's routing and grouped rows
  };

  void check_batch(const ForwardBatch& batch) const;
  // One part of at most max_step_tokens_ tokens (checked), its logit rows into `logits`.
  void run_part(const ForwardBatch& batch, float* logits);
  void prepare(const ForwardBatch& batch);
  void run_layer(int64_t layer, int64_t num_tokens);
  // y = x w^T (+ y) on the path the options chose.
  void matmul(const float* x, const CpuMatrix& w, float* y, int64_t num_tokens, bool accumulate);
  // The residual stream x += in w^T; a split model sums the ranks' parts first.
  void add_projection(const float* in, const CpuMatrix& w, int64_t num_tokens);
  // x += s_.partial (summed over the ranks first on a split model).
  void add_partial(int64_t num_tokens);
  void embed(const ForwardBatch& batch);
  // Logits of the rows s_.last holds into `logits` (rows, vocab).
  void lm_head(float* logits, int64_t num_rows);

  ModelConfig config_;
  CpuTpRank tp_;  // comm null: the whole model
  KvCacheShape kv_shape_;
  AttentionDims attn_dims_;
  int num_threads_ = 1;
  int64_t max_step_tokens_ = 0;
  std::unique_ptr<CpuThreadPool> pool_;  // the q8 path's products, attention, element-wise ops
  CpuActivations activations_ = CpuActivations::kQ8;
  CpuIsa isa_ = CpuIsa::kAvx2;
  CpuIsa built_isa_ = CpuIsa::kAvx2;  // the q8_kernel family's stable variant
  CpuWeights weights_;
  std::vector<float> inv_freq_;  // (head_dim / 2)
  // Per layer, K and V arenas of num_blocks slots (kv/kv_format.h gives each block's bytes).
  // Left uninitialized: attention reads only positions a step has written.
  std::vector<std::unique_ptr<uint8_t[]>> k_cache_;
  std::vector<std::unique_ptr<uint8_t[]>> v_cache_;
  // The host tier: [num_layers, 2 (K, V), num_host_slots, slot_bytes], left uninitialized too.
  std::unique_ptr<uint8_t[]> host_cache_;
  double host_link_bytes_per_s_ = 0.0;  // memcpy, measured at construction
  kv::KvBlockFormats kv_formats_;
  std::vector<float> requantize_rows_;
  Scratch s_;

  KvArenas arenas(int64_t layer) const;
};

}  // namespace optimate::cpu
