// The device-side state of a CudaModelRunner, shared by its construction code and its forward
// pass. Internal to src/backend/cuda.
#pragma once

#include <deque>
#include <map>
#include <memory>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_model_runner.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kv_block.h"
#include "backend/cuda/kv_swap.h"
#include "backend/cuda/moe_layer.h"
#include "backend/cuda/paged_attention.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/sampling.h"
#include "backend/cuda/stage_timer.h"
#include "backend/cuda/step_inputs.h"
#include "kv/copy_tracker.h"

namespace optimate::cuda {

struct CudaModelRunner::State {
  CudaRunnerOptions options;
  ModelConfig config;
  CudaWeights weights;
  KvCacheShape kv_shape;
  MemoryPlan plan;
  StepLimits limits;
  StepLayout layout;
  int num_sms = 0;
  cudaStream_t stream = nullptr;
  std::unique_ptr<Gemm> gemm;
  std::unique_ptr<Fp8Gemm> fp8_gemm;  // FP8 weights only

  // KV cache: [num_layers, 2 (K, V), num_slots, slot_bytes] (kv_block.h).
  DeviceBuffer<uint8_t> kv_cache;
  bool kv_quantized = false;           // the layout may hold fp8, int8 or int4 blocks
  DeviceBuffer<int> kv_row_counters;   // [kGemvMaxRows, 2, num_kv_heads] zeros: the fused QKV GEMV
  DeviceBuffer<int32_t> requantize_ops;   // [n, 2] (from, to) entries of the latest requantize()
  DeviceBuffer<uint8_t> requantize_scratch;  // a dynamic cache's blocks on their way back
  DeviceBuffer<float> inv_freq;     // (head_dim / 2)
  // Step metadata: pinned host staging and its device mirror, both layout.total int32. Two
  // staging slots alternate (with two of sample_staging), so a step may be packed while the
  // one before it is still copying; staging_free[i] is recorded after slot i's last copy.
  int32_t* staging_slots[2] = {nullptr, nullptr};
  GpuSampleRow* sample_staging_slots[2] = {nullptr, nullptr};
  cudaEvent_t staging_free[2] = {nullptr, nullptr};
  int staging_slot = 0;  // the current slot (next_staging)
  int32_t* staging() const { return staging_slots[staging_slot]; }
  GpuSampleRow* sample_staging() const { return sample_staging_slots[staging_slot]; }
  DeviceBuffer<int32_t> step;
  // Activations, sized for max_num_batched_tokens rows (logits rows: max_num_seqs).
  DeviceBuffer<float> residual;          // [T, hidden]
  DeviceBuffer<__nv_bfloat16> normed;    // [T, hidden]
  DeviceBuffer<__nv_bfloat16> qkv;       // [T, q_dim + 2 kv_dim]
  DeviceBuffer<__nv_bfloat16> attn;      // [T, q_dim]
  DeviceBuffer<__nv_bfloat16> branch;    // [T, hidden]: attention or MLP output
  // A dense MLP runs mlp_chunk_rows rows at a time, and its buffers share one allocation with
  // the logits: a step writes the logits only after its last layer, and the next step's MLP
  // comes after the sampling that reads them (stream order; every kernel writes its output only
  // after waiting for the kernel before it). A mixture of experts runs over the whole step in
  // buffers of its own (moe), and the allocation holds the logits alone.
  DeviceBuffer<uint8_t> mlp_logits;
  int64_t mlp_chunk_rows = 0;            // 0 with experts
  DeviceView<__nv_bfloat16> gate_up;     // [mlp_chunk_rows, 2 intermediate]; empty with experts
  DeviceView<__nv_bfloat16> act;         // [mlp_chunk_rows, intermediate]
  MoeBuffers moe;                        // a mixture of experts' routing and grouped rows, [T] tokens
  DeviceBuffer<float> attn_workspace;    // split-K partials
  DeviceBuffer<int> attn_split_counters;  // [attn_workspace_rows, num_kv_heads], kept zero
  DeviceView<float> logits;              // [max_num_seqs, vocab]
  DeviceBuffer<int32_t> greedy;          // [max_num_seqs]
  DeviceBuffer<int32_t> sampled;         // [max_num_seqs]: sample_rows_fused's draws
  DeviceBuffer<GpuSampleRow> sample_rows;  // [max_num_seqs]
  // The sampling family's unfused variant (set_kernel_variant): its scratch is made on first
  // use (the memory profile's, so the plan counts it) and holds kUnfusedSamplerRows rows, the
  // step's rows going through it that many at a time.
  bool unfused_sampling = false;
  std::unique_ptr<UnfusedSampler> unfused_sampler;
  bool stable_fused_elementwise = true;  // the elementwise family's stable variant

  // Steps launched without waiting (launch_sample), oldest first: each draws into a pinned
  // host buffer, and its event follows that copy. The last launch's draws stay on the device
  // (last_drawn, last_drawn_rows rows) for the next step's fed-back tokens.
  struct Launch {
    int64_t rows = 0;
    int out = 0;   // which of launch_out / launch_done
    int span = 0;  // the timer's span slot
  };
  std::deque<Launch> launches;
  int32_t* launch_out[2] = {nullptr, nullptr};
  cudaEvent_t launch_done[2] = {nullptr, nullptr};
  int next_launch_out = 0;
  const int32_t* last_drawn = nullptr;
  int64_t last_drawn_rows = 0;
  int64_t attn_workspace_rows = 0;       // rows whose splits fit in attn_workspace
  DecodeAttentionShape attn_shape;       // picks the decode attention kernel and its splits

  // The host tier (kv_swap.h): [num_layers, 2 (K, V), num_host_slots, slot_bytes], pinned and
  // mapped. Copies run on copy_stream after everything enqueued on `stream` before them; a
  // step waits on a batch's event only when one of its blocks is among the batch's slots.
  uint8_t* host_kv = nullptr;
  cudaStream_t copy_stream = nullptr;
  cudaEvent_t copies_may_start = nullptr;
  std::deque<std::pair<int64_t, cudaEvent_t>> copy_batches;  // in flight: (batch id, its end)
  std::vector<cudaEvent_t> spare_events;
  std::unique_ptr<kv::CopyTracker> copy_tracker;
  int64_t next_copy_batch = 0;
  DeviceBuffer<KvSwapOp> swap_ops;
  std::vector<KvSwapOp> swap_staging;
  double host_link_bytes_per_s = 0.0;  // measured at construction

  StageTimer timer;  // per-stage times of eager steps, when on

  // Decode graphs by padded batch size.
  std::map<int64_t, cudaGraphExec_t> graphs;

  // Tensor parallelism (tp.comm null: the whole model). The embedding and LM head hold the
  // vocabulary rows [vocab_begin, vocab_begin + vocab_rows).
  CudaTpRank tp;
  int64_t vocab_begin = 0, vocab_rows = 0;
  DeviceBuffer<float> partial;          // [T, hidden]: a row-parallel projection's part, then the sum
  DeviceBuffer<float> rank_logits;      // [max_num_seqs, vocab_per_rank]: this rank's LM-head slice
  DeviceBuffer<float> gathered_logits;  // [ranks, max_num_seqs, vocab_per_rank]
  uint64_t comm_generation = 0;         // the communicator group the graphs were captured with

  KvArena kv_arena(int64_t layer) const;
  int decode_splits(int64_t num_rows, int64_t max_ctx) const;

  // Enqueues the whole forward pass for the step described by `in` (already on the device):
  // the LM head and argmax over the first min(logits rows, max_num_seqs) rows.
  void enqueue_forward(const StepInputs& in, int num_splits);
  // The LM head over logits rows [first, first + count) of the step just enqueued (count at
  // most max_num_seqs), into `logits` (on a rank: its slice, gathered from every rank).
  void enqueue_lm_head(int64_t first, int64_t count);
  // On a rank, data [count] becomes the sum over the ranks (stream order); nothing otherwise.
  void all_reduce(float* data, int64_t count);
  // Whether uniform decode steps may replay graphs (a rank's collectives must be capturable).
  bool graphs_allowed() const;
};

DecodeAttentionShape decode_attention_shape(const ModelConfig& c, const CudaRunnerOptions& o);

// Makes the runner's GPU current on the calling thread: a rank runner is called from the thread
// of whichever rank drives it, and every runner from whatever thread the engine runs on.
void bind_device(const CudaModelRunner::State& st);

// Moves st.staging() and st.sample_staging() to the other slot, once its last copy has run.
void next_staging(CudaModelRunner::State& st);
// After the step's last host-to-device copy is enqueued: the current slot may be reused.
void staging_copied(CudaModelRunner::State& st);
// Runs one step on the GPU (inputs packed into the current staging slot, copied, the forward
// enqueued or its decode graph replayed); tokens token_from_last_launch(k) take row k of
// st.last_drawn. Returns the number of logits rows that belong to real slices.
int64_t run_step(CudaModelRunner::State& st, const ForwardBatch& batch);
// Enqueues sampling of the step's `n` logits rows from the current sample_staging slot (already
// filled); returns where the drawn ids land on the device.
const int32_t* enqueue_sampling(CudaModelRunner::State& st, int64_t n);
// run_step, then the draw of one token per row (`call` names the caller in errors); returns
// where the drawn ids land on the device (runner_launch.cpp).
const int32_t* run_step_and_sample(CudaModelRunner::State& st, const ForwardBatch& batch,
                                   std::span<const SampleSpec> rows, const char* call);

// The host tier (runner_swap.cpp): allocates the pinned arenas and the copy stream and measures
// the host link; makes `stream` wait for the copies `batch` needs; frees it all.
void init_host_tier(CudaModelRunner::State& st);
void wait_for_copies(CudaModelRunner::State& st, const ForwardBatch& batch);
void free_host_tier(CudaModelRunner::State& st);

// The widest input of a linear layer (the FP8 activation scratch's row).
int64_t runner_fp8_max_k(const ModelConfig& c);

// Rows of the MLP a step runs at once, at least (a step of more tokens runs it in chunks).
inline constexpr int64_t kMlpChunkRows = 2048;

// The device buffers a configuration needs besides weights and the KV cache.
struct ActivationPlan {
  int64_t mlp_chunk_rows = 0;    // 0 with experts: their MLP runs over the whole step
  int64_t act_offset = 0;        // act's bytes into the shared MLP and logits allocation
  int64_t logits_floats = 0;
  int64_t mlp_logits_bytes = 0;  // max(the MLP chunk's gate_up and act, the logits)
  int64_t moe_bytes = 0;         // MoeBuffers for the whole step
  int64_t buffer_bytes = 0;      // every buffer, workspaces included
};
// `tp`: a rank's split (its all-reduce and logits buffers), or null.
ActivationPlan plan_activations(const ModelConfig& c, const CudaRunnerOptions& o, int num_sms,
                                int64_t max_model_len, const parallel::TpPartition* tp = nullptr);

// Error for a model shape or step bounds the runner cannot take.
void check_runner_options(const ModelConfig& c, const CudaRunnerOptions& o);
// The context length the runner allocates for: the setting, else the model's up to 8192.
int64_t resolve_max_model_len(const ModelConfig& c, const CudaRunnerOptions& o);
// The memory plan's input for config under options on a GPU of `total_bytes`, `free_bytes` of
// them free for the pool (MemoryPlanInput::free_bytes), for `weight_bytes` of weights and
// `activation_bytes` of everything else but the pool. Host arithmetic alone, so a test plans a
// GPU that is not there.
MemoryPlanInput runner_memory_plan_input(const ModelConfig& c, const CudaRunnerOptions& o, int64_t weight_bytes,
                                         int64_t activation_bytes, int64_t total_bytes, int64_t free_bytes,
                                         bool fp8_weights_possible);
// The plan before anything of the runner's is allocated, on a GPU of `total_bytes` with
// `free_bytes` free (cudaMemGetInfo once the CUDA context exists): the weights, the
// activations' estimate with an allowance for what the runtime allocates for a step, and one
// full-length sequence's KV against the budget, the weights and activations to come out of the
// free memory before the pool. Host arithmetic alone.
MemoryPlan plan_memory_before_load(const ModelConfig& c, const CudaRunnerOptions& o, int num_sms,
                                   int64_t weight_bytes, int64_t total_bytes, int64_t free_bytes,
                                   bool fp8_weights_possible);
// plan_memory_before_load on the runner's GPU as it stands now: fails on memory before
// gigabytes of weights are copied or generated.
void check_memory_fits(const ModelConfig& c, const CudaRunnerOptions& o, int num_sms, int64_t weight_bytes);
// The device's memory in use now (every process), as cudaMemGetInfo reports it.
int64_t device_used_bytes();
// Allocates a pool of num_slots slots per arena (dropping the one before) and sets the shape
// and step limits that name it.
void set_kv_pool(CudaModelRunner::State& st, int64_t num_slots);
// With every buffer but the pool allocated (`used_before_buffers`: the device's used bytes before
// them): a whole-model runner runs its widest steps once on a one-page arena and counts what
// the device's used memory grew by; a rank counts `activations` and an allowance. Then plans and
// allocates the pool (st.plan).
void plan_kv_pool(CudaModelRunner::State& st, int64_t used_before_buffers, const ActivationPlan& activations);

// The KV layout options ask for (kv::plan_kv_layout with the runner's bf16); Error for a
// precision the runner cannot hold.
kv::KvLayout runner_kv_layout(const ModelConfig& c, const CudaRunnerOptions& o);

// Requantize ops per batch of the scratch a dynamic cache keeps.
inline constexpr int64_t kRequantizeBatchOps = 8;

}  // namespace optimate::cuda
