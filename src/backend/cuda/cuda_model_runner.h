// The CUDA ModelRunner for Llama-family decoders: bf16 weights and a paged KV cache of bf16,
// fp8, int8 or int4 blocks on one GPU, cuBLASLt GEMMs, the kernels of this folder, and CUDA
// graphs replayed for decode steps.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_weights.h"
#include "backend/cuda/memory_plan.h"
#include "runner/model_runner.h"
#include "model/fp8_quant.h"
#include "model/weights.h"
#include "parallel/tp_partition.h"

namespace optimate::cuda {

struct CudaRunnerOptions {
  int device = 0;
  double gpu_memory_utilization = 0.9;
  int64_t block_size = 16;
  int64_t max_num_batched_tokens = 8192;  // tokens in one step (sizes the activations)
  int64_t max_num_seqs = 256;
  int64_t max_model_len = 0;   // 0: the model's max_position_embeddings, at most 8192
  // KV slots per arena (KvCacheShape::num_blocks; whole pages of a dynamic cache); 0: as many
  // as the memory plan allows.
  int64_t num_kv_blocks = 0;
  // The host tier (swap space, then host prefix cache), pinned host memory with the cache's
  // layout; none when both are 0.
  kv::HostTierSlots host_tier;
  // The cache's precision (kv/kv_layout.h's base): bf16, or fp8, int8, int4 for a cache
  // quantized from the start. f32 is refused: the runner's own precision is bf16.
  kv::KvPrecision kv_cache_dtype = kv::KvPrecision::kBF16;
  // Set (fp8, int8 or int4) for a dynamic cache: blocks start bf16 (kv_cache_dtype must be
  // bf16) and requantize() turns them into blocks of this precision or a coarser one.
  std::optional<kv::KvPrecision> kv_finest_precision;
  // How its int4 blocks scale their keys: per token only (per channel is refused).
  kv::Int4Keys kv_int4_keys = kv::Int4Keys::kPerToken;
  bool cuda_graphs = true;     // capture and replay uniform decode steps per batch bucket
  // Larger decode batches run eagerly: their launch gaps are a small share of a step, and a
  // shrinking batch would otherwise capture a graph for every bucket on its way down.
  int64_t max_graph_batch = 256;
  bool tensor_core_prefill = true;  // prefill chunks on the tiled tensor-core kernel
  // Decode attention on the tensor-core kernel where it applies (paged_attention.h); false
  // keeps the CUDA-core kernel, its baseline.
  bool tensor_core_decode = true;
  // Steps of at most fused_decode_max_rows tokens run RMSNorm, RoPE + KV write, SiLU*mul and
  // the residual adds inside the small-m GEMV (four weight-streaming launches per layer). Past
  // two rows it loses: decode steps of 3, 4 and 8 rows took 7.9, 7.9 and 13.7 ms fused against
  // 5.3, 5.3 and 5.6 ms unfused on an H200 (2 rows: 5.4 fused, 5.8 unfused); why its time grows
  // so with the rows is not yet profiled.
  bool fused_decode = true;
  int64_t fused_decode_max_rows = 2;
  // Steps past the fused decode path (prefill, wider decode batches) run RoPE and the KV write
  // in one launch, RMSNorm and SiLU*mul as one-pass row kernels, and, with FP8 weights, let
  // RMSNorm and SiLU*mul round their output to e4m3 for the next linear (no separate pass).
  // false keeps the separate kernels of before, the baseline benchmarks compare against; both
  // give the same logits up to the order of RMSNorm's sum.
  bool fused_elementwise = true;
  // kFp8: the linear projections run from e4m3 weights with per-row scales (fp8_weights.h,
  // fp8_gemm.h); bf16 weights handed to the runner are quantized at construction.
  WeightQuantization quantization = WeightQuantization::kNone;
};

class DeviceCommunicator;

// One rank of a model split by tensor parallelism (parallel/tp_partition.h; cuda_tp_runner.h
// builds them): the runner is built from the rank's weights (its heads, MLP features and
// vocabulary rows) and meets the other ranks through `comm` after the embedding, after the o and
// down projections of every layer, and for the logits, which every rank then holds whole.
struct CudaTpRank {
  DeviceCommunicator* comm = nullptr;  // null: the whole model on one GPU
  parallel::TpPartition partition;
};

class CudaModelRunner final : public ModelRunner {
 public:
  // Uploads host weights (any dtype; quantized ones are dequantized to bf16).
  CudaModelRunner(const LoadedModel& model, const CudaRunnerOptions& options);
  // Takes weights already on the GPU (make_dummy_weights).
  CudaModelRunner(CudaWeights weights, const CudaRunnerOptions& options);
  // Rank tp.comm->rank() of a split model on options.device: weights.config is
  // rank_model_config's with vocab_size the rank's vocabulary rows; config() reports the whole
  // vocabulary (logits rows stay whole). Decode graphs are not captured here: the ranks capture
  // together (capture_decode_graphs), since the warm-up steps meet in collectives.
  CudaModelRunner(CudaWeights weights, const CudaRunnerOptions& options, const CudaTpRank& tp);
  ~CudaModelRunner() override;
  // Seeded random weights of config's shape (make_dummy_weights), after checking that the
  // weights, activations and one full-length sequence's KV fit the memory plan.
  static std::unique_ptr<CudaModelRunner> with_dummy_weights(const ModelConfig& config, uint64_t seed,
                                                             const CudaRunnerOptions& options);

  const ModelConfig& config() const override;
  const KvCacheShape& kv_shape() const override;
  // In place on the GPU, every layer's K and V (kv_requantize.h); enqueued on the runner's
  // stream before the next step. Error(kInvalidArgument) for ops the layout does not allow.
  void requantize(std::span<const RequantizeOp> ops) override;
  // On a second stream, overlapped with the steps that follow (kv_swap.h); a step waits only
  // for copies of its own blocks.
  void copy_kv(std::span<const kv::KvCopy> copies) override;
  // Measured at construction with the copy kernel, both directions.
  double host_link_bytes_per_s() const override;
  // The KV layout `options` give for `config` (Error for a precision the runner cannot hold).
  static kv::KvLayout plan_layout(const ModelConfig& config, const CudaRunnerOptions& options);
  // Slices with all_logits get a row per token; the LM head runs over them in chunks of
  // max_num_seqs rows (the logits buffer).
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;
  // Samples on the GPU: greedy rows take the argmax the step computes anyway; a batch with any
  // other row goes through sample_rows_fused (sampling.h). Only token ids cross to the host.
  bool forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows,
                      std::vector<int32_t>& token_ids) override;

  // forward_sample without waiting: the draws land in a pinned buffer that collect_sample()
  // waits for; fed-back tokens are filled in on the device before the embedding. A rank of a
  // tensor-parallel group refuses (false).
  bool launch_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows) override;
  void collect_sample(std::vector<int32_t>& token_ids) override;

  // Like forward, but returns the greedy token of each logits row (argmax on the GPU), so only
  // one int32 per row crosses back to the host. Not for all_logits slices.
  void forward_greedy(const ForwardBatch& batch, std::vector<int32_t>& token_ids);

  // Turns decode-graph replay on or off (benchmarks compare both); captured graphs are kept.
  void set_cuda_graphs(bool enabled);
  // Switches the fused small-step path and programmatic dependent launch (a process-wide
  // setting, see programmatic_launch.h); drops captured graphs so replays use the new choice.
  void set_launch_options(bool fused_decode, bool programmatic_launch);
  // Switches CudaRunnerOptions::fused_elementwise; drops captured graphs likewise.
  void set_fused_elementwise(bool fused);
  // sampling (fused, the stable one, or unfused: sampling.h's two implementations) and
  // elementwise (fused or separate, the one the options gave stable); none on a rank of a
  // tensor-parallel group.
  std::vector<KernelFamily> kernel_families() const override;
  void set_kernel_variant(std::string_view family, std::string_view variant) override;

  // Times each stage of eager steps (graphs are not replayed while on); see stage_timer.h.
  void set_stage_timing(bool enabled);
  // Milliseconds per stage summed over the timed steps since the last call, by stage_name.
  std::vector<std::pair<std::string, double>> take_stage_times(int64_t* num_steps = nullptr);

  const MemoryPlan& memory_plan() const;
  StepCapacity capacity() const override;
  int64_t weight_bytes() const override;
  void time_next_step_by_stage() override;
  bool last_step_device_times(StepDeviceTimes& out) const override;

  // Captures the decode graph of every batch bucket up to max_graph_batch (the constructor of a
  // whole-model runner does, when graphs are on), so no step of a run pays for a capture: tens
  // of milliseconds each on the Llama-3-8B shape, a dozen buckets. A rank whose communicator
  // cannot be captured runs eagerly and captures nothing.
  void capture_decode_graphs();

  struct State;  // device buffers and plans; defined in runner_state.h

 private:

  std::unique_ptr<State> state_;
};

// What options need of GPU options.device (kernel_paths.h: FP8 weights, also when `fp8_weights`
// come quantized, and fp8 KV need compute capability 8.9); Error(kUnsupported) naming the
// alternatives. Every runner checks at construction, before weights are loaded.
void check_runner_gpu(const CudaRunnerOptions& options, bool fp8_weights = false);

// GPUs the CUDA runtime sees; 0 when there is none or no driver (never throws).
int cuda_device_count();

}  // namespace optimate::cuda
