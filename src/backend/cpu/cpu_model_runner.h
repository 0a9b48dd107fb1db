// The CPU backend: a multi-threaded fp32 forward pass of a Llama-family decoder
// (Llama 2/3, SmolLM2, Mistral, Qwen2) over the paged KV cache of backend/model_runner.h.
//
// One forward() call runs every token of the batch (prefill chunks and decodes mixed) through
// each layer together: the token rows share the GEMMs (quantized kernels for a few rows over
// Q8_0/Q4_1 weights, OpenBLAS otherwise; sgemv for a single fp32 row), and
// attention runs per (token, kv head) on OpenMP threads, reading K/V through block tables.
// Scratch buffers only grow, so steady-state decoding allocates nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/paged_attention.h"
#include "backend/cpu/cpu_weights.h"
#include "backend/model_runner.h"
#include "model/weights.h"

namespace optimate::cpu {

struct CpuRunnerOptions {
  int64_t num_kv_blocks = 0;  // KV cache capacity in slots (required; kv/kv_layout.h)
  int64_t block_size = 16;    // tokens per block
  // The cache's precision (f32, bf16, or fp8/int8/int4 for a static quantized cache) and, for
  // a cache the kv_quant optimizer may requantize, the finest precision it may use.
  kv::KvPrecision kv_precision = kv::KvPrecision::kF32;
  std::optional<kv::KvPrecision> kv_finest;
  int num_threads = 0;        // 0: OpenMP's default (all cores)
  // Q8_0/Q4_1 matrices stay quantized (a quarter or less of the fp32 bytes per step); false
  // widens every weight to fp32 at load, the reference path.
  bool keep_quantized = true;
};

class CpuModelRunner final : public ModelRunner {
 public:
  CpuModelRunner(const ModelConfig& config, const ModelWeights& weights,
                 const CpuRunnerOptions& options);

  const ModelConfig& config() const override { return config_; }
  const KvCacheShape& kv_shape() const override { return kv_shape_; }
  void requantize(std::span<const RequantizeOp> ops) override;
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;

  int num_threads() const { return num_threads_; }
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
    std::vector<int64_t> positions;
    std::vector<int64_t> logit_rows;
    std::vector<AttentionSeq> seqs;
    AttentionScratch attention;
  };

  void check_batch(const ForwardBatch& batch) const;
  void prepare(const ForwardBatch& batch);
  void run_layer(int64_t layer, int64_t num_tokens);

  ModelConfig config_;
  KvCacheShape kv_shape_;
  AttentionDims attn_dims_;
  int num_threads_ = 1;
  CpuWeights weights_;
  std::vector<float> inv_freq_;  // (head_dim / 2)
  // Per layer, K and V arenas of num_blocks slots (kv/kv_format.h gives each block's bytes).
  // Left uninitialized: attention reads only positions a step has written.
  std::vector<std::unique_ptr<uint8_t[]>> k_cache_;
  std::vector<std::unique_ptr<uint8_t[]>> v_cache_;
  std::array<std::optional<kv::BlockLayout>, 4> kv_formats_;
  std::vector<float> requantize_rows_;
  Scratch s_;

  KvArenas arenas(int64_t layer) const;
};

}  // namespace optimate::cpu
