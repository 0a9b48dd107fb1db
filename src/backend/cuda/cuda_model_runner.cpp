// Construction (memory plan, buffers), the host side of a step (pack, copy, launch or replay,
// copy back) and decode-graph capture.
#include "backend/cuda/cuda_model_runner.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_communicator.h"
#include "backend/cuda/fp8_weights.h"
#include "core/error.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernel_paths.h"
#include "backend/cuda/kv_requantize.h"
#include "backend/cuda/paged_attention.h"
#include "backend/cuda/programmatic_launch.h"
#include "backend/cuda/runner_state.h"
#include "backend/cuda/step_inputs.h"
#include "backend/cuda/token_feedback.h"
#include "core/logging.h"

namespace optimate::cuda {
namespace {

// Decode graph batch sizes: powers of two, then every 32.
int64_t graph_bucket(int64_t num_seqs) {
  int64_t b = 1;
  while (b < num_seqs && b < 32) b *= 2;
  if (b >= num_seqs) return b;
  return (num_seqs + 31) / 32 * 32;
}

}  // namespace

int64_t resolve_max_model_len(const ModelConfig& c, const CudaRunnerOptions& o) {
  if (o.max_model_len > 0) return o.max_model_len;
  return c.max_position_embeddings > 0 ? std::min<int64_t>(c.max_position_embeddings, 8192) : 8192;
}

void bind_device(const CudaModelRunner::State& st) { OPTIMATE_CUDA_CHECK(cudaSetDevice(st.options.device)); }

kv::KvLayout runner_kv_layout(const ModelConfig& c, const CudaRunnerOptions& o) {
  if (o.kv_cache_dtype == kv::KvPrecision::kF32)
    fail(ErrorCode::kUnsupported, "the CUDA runner keeps KV in bf16, fp8, int8 or int4; kv-cache-dtype f32 "
         "is not supported");
  // int4 keys scaled per channel (kv/kv_format.h) are read by no kernel here: refused rather
  // than read as per-token scales.
  if (o.kv_int4_keys == kv::Int4Keys::kPerChannel)
    fail(ErrorCode::kUnsupported, "kv_quant's int4_keys = \"channel\" is not built on the CUDA backend; use "
         "int4_keys = \"token\" (the default) there");
  return kv::plan_kv_layout(kv::KvPrecision::kBF16, o.kv_cache_dtype, o.kv_finest_precision, c.num_kv_heads,
                            o.block_size, c.head_dim, o.kv_int4_keys);
}

DecodeAttentionShape decode_attention_shape(const ModelConfig& c, const CudaRunnerOptions& o) {
  return {c.num_heads, c.num_kv_heads, c.head_dim, o.block_size,
          o.tensor_core_decode ? DecodeAttentionKernel::kAuto : DecodeAttentionKernel::kCudaCores,
          o.kv_cache_dtype != kv::KvPrecision::kBF16 || o.kv_finest_precision.has_value()};
}

int64_t runner_fp8_max_k(const ModelConfig& c) {
  return std::max({c.hidden_size, c.num_heads * c.head_dim, c.mlp_width()});
}

namespace {

int device_sms(int device) {
  OPTIMATE_CUDA_CHECK(cudaSetDevice(device));
  int sms = 0;
  OPTIMATE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// Fails on what the GPU lacks, and on memory, before gigabytes of weights are copied or
// generated.
void check_fits(const ModelConfig& config, const CudaRunnerOptions& options) {
  check_runner_gpu(options);
  check_memory_fits(config, options, device_sms(options.device), cuda_weight_bytes(config));
}

}  // namespace

CudaModelRunner::CudaModelRunner(const LoadedModel& model, const CudaRunnerOptions& options)
    : state_(std::make_unique<State>()) {
  check_fits(model.config, options);
  CudaModelRunner tmp(upload_weights(model), options);
  state_ = std::move(tmp.state_);
}

std::unique_ptr<CudaModelRunner> CudaModelRunner::with_dummy_weights(const ModelConfig& config, uint64_t seed,
                                                                     const CudaRunnerOptions& options) {
  check_fits(config, options);
  return std::make_unique<CudaModelRunner>(make_dummy_weights(config, seed), options);
}

void check_runner_gpu(const CudaRunnerOptions& options, bool fp8_weights) {
  check_gpu_features(device_kernel_paths(options.device),
                     fp8_weights ? WeightQuantization::kFp8 : options.quantization, options.kv_cache_dtype,
                     options.kv_finest_precision);
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // reset the "no device" error so later calls do not report it
    return 0;
  }
  return n;
}

CudaModelRunner::CudaModelRunner(CudaWeights weights, const CudaRunnerOptions& options)
    : CudaModelRunner(std::move(weights), options, CudaTpRank{}) {
  capture_decode_graphs();
}

CudaModelRunner::CudaModelRunner(CudaWeights weights, const CudaRunnerOptions& options, const CudaTpRank& tp)
    : state_(std::make_unique<State>()) {
  check_runner_gpu(options, weights.fp8());
  State& st = *state_;
  st.num_sms = device_sms(options.device);
  st.options = options;
  st.config = weights.config;
  st.vocab_rows = weights.config.vocab_size;
  st.tp = tp;
  if (tp.comm) {
    const parallel::TpPartition& p = tp.partition;
    const int rank = tp.comm->rank();
    if (p.num_ranks != tp.comm->size() || p.heads_per_rank != st.config.num_heads ||
        p.kv_heads_per_rank != st.config.num_kv_heads || p.intermediate_per_rank != st.config.mlp_width() ||
        p.vocab_end(rank) - p.vocab_begin(rank) != st.vocab_rows)
      fail(ErrorCode::kInternal, "CUDA rank {}: the partition does not match the rank's weights", rank);
    st.vocab_begin = p.vocab_begin(rank);
    st.config.vocab_size = p.vocab_size;  // logits rows and token ids stay whole
  }
  if (options.quantization == WeightQuantization::kFp8 && !weights.fp8())
    weights = quantize_weights_fp8(std::move(weights));
  if (weights.fp8()) st.options.quantization = WeightQuantization::kFp8;
  st.weights = std::move(weights);
  const ModelConfig& c = st.config;
  check_runner_options(c, st.options);
  const int64_t len = resolve_max_model_len(c, options);
  // What the device holds before the runner's buffers (weights, context, other processes): the
  // profile counts only what comes after.
  const int64_t used_before_buffers = device_used_bytes();
  const ActivationPlan activations = plan_activations(c, st.options, st.num_sms, len, tp.comm ? &tp.partition : nullptr);

  const kv::KvLayout layout = runner_kv_layout(c, options);
  st.kv_quantized = layout.dynamic() || !kv::is_full_precision(layout.base);
  OPTIMATE_CHECK(st.kv_quantized || layout.slot_bytes == kv_bf16_block_bytes(c.num_kv_heads, options.block_size,
                                                                            c.head_dim),
                 "bf16 slot of {} bytes", layout.slot_bytes);
  st.kv_row_counters.resize(static_cast<size_t>(kGemvMaxRows * 2 * c.num_kv_heads));
  OPTIMATE_CUDA_CHECK(cudaMemset(st.kv_row_counters.get(), 0, st.kv_row_counters.bytes()));
  if (layout.dynamic())
    st.requantize_scratch.resize(static_cast<size_t>(kv_requantize_scratch_bytes(
        {nullptr, 0, 0, c.num_layers, c.num_kv_heads, options.block_size, c.head_dim}, kRequantizeBatchOps)));

  st.limits.max_num_tokens = options.max_num_batched_tokens;
  st.limits.max_num_seqs = options.max_num_seqs;
  st.limits.max_blocks_per_seq = (len + options.block_size - 1) / options.block_size;
  st.limits.block_size = options.block_size;
  st.limits.kv_block_slots = kv_block_slots(layout, c.num_kv_heads, options.block_size, c.head_dim);
  st.limits.vocab_size = c.vocab_size;
  st.limits.max_model_len = len;
  st.limits.tensor_core_prefill = options.tensor_core_prefill;
  st.layout = StepLayout(st.limits);
  for (int i = 0; i < 2; ++i) {
    OPTIMATE_CUDA_CHECK(cudaMallocHost(&st.staging_slots[i], st.layout.total * sizeof(int32_t)));
    std::memset(st.staging_slots[i], 0, st.layout.total * sizeof(int32_t));
    OPTIMATE_CUDA_CHECK(cudaMallocHost(&st.sample_staging_slots[i], options.max_num_seqs * sizeof(GpuSampleRow)));
    OPTIMATE_CUDA_CHECK(cudaMallocHost(&st.launch_out[i], options.max_num_seqs * sizeof(int32_t)));
    OPTIMATE_CUDA_CHECK(cudaEventCreateWithFlags(&st.staging_free[i], cudaEventDisableTiming));
    OPTIMATE_CUDA_CHECK(cudaEventCreateWithFlags(&st.launch_done[i], cudaEventDisableTiming));
  }
  st.step.resize(st.layout.total);
  OPTIMATE_CUDA_CHECK(cudaMemset(st.step.get(), 0, st.step.bytes()));

  const std::vector<float> inv_freq = rope_inv_freq(c);
  st.inv_freq.resize(inv_freq.size());
  OPTIMATE_CUDA_CHECK(cudaMemcpy(st.inv_freq.get(), inv_freq.data(), inv_freq.size() * 4,
                                 cudaMemcpyHostToDevice));

  const int64_t T = options.max_num_batched_tokens, S = options.max_num_seqs;
  const int64_t q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
  st.residual.resize(T * c.hidden_size);
  st.normed.resize(T * c.hidden_size);
  st.branch.resize(T * c.hidden_size);
  st.qkv.resize(T * (q_dim + 2 * kv_dim));
  st.attn.resize(T * q_dim);
  // A mixture of experts runs its MLP over the whole step in buffers of its own (MoeBuffers);
  // a dense MLP runs in chunks whose buffers share the logits' allocation.
  st.mlp_logits.resize(static_cast<size_t>(activations.mlp_logits_bytes));
  st.mlp_chunk_rows = activations.mlp_chunk_rows;
  uint8_t* shared = st.mlp_logits.get();
  if (c.is_moe()) {
    st.moe.allocate(c, T);
  } else {
    st.gate_up = {reinterpret_cast<__nv_bfloat16*>(shared),
                  static_cast<size_t>(st.mlp_chunk_rows * 2 * c.intermediate_size)};
    st.act = {reinterpret_cast<__nv_bfloat16*>(shared + activations.act_offset),
              static_cast<size_t>(st.mlp_chunk_rows * c.intermediate_size)};
  }
  st.logits = {reinterpret_cast<float*>(shared), static_cast<size_t>(activations.logits_floats)};
  st.attn_shape = decode_attention_shape(c, options);
  OPTIMATE_CHECK(st.attn_shape.quantized_kv == st.kv_quantized, "decode attention shape disagrees with the KV layout");
  st.attn_workspace_rows = paged_attention_split_rows(st.attn_shape, st.num_sms);
  st.attn_workspace.resize(paged_attention_split_workspace_floats(st.attn_shape, st.num_sms));
  st.attn_split_counters.resize(st.attn_workspace_rows * c.num_kv_heads);
  OPTIMATE_CUDA_CHECK(cudaMemset(st.attn_split_counters.get(), 0, st.attn_split_counters.bytes()));
  st.greedy.resize(S);
  st.sampled.resize(S);
  st.sample_rows.resize(S);

  if (tp.comm) {
    const int64_t stride = tp.partition.vocab_per_rank;
    st.partial.resize(T * c.hidden_size);
    st.rank_logits.resize(S * stride);
    st.gathered_logits.resize(tp.partition.num_ranks * S * stride);
    st.comm_generation = tp.comm->generation();
  }

  OPTIMATE_CUDA_CHECK(cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking));
  st.gemm = std::make_unique<Gemm>();
  if (st.weights.fp8()) st.fp8_gemm = std::make_unique<Fp8Gemm>(T, runner_fp8_max_k(c));
  st.stable_fused_elementwise = options.fused_elementwise;
  plan_kv_pool(st, used_before_buffers, activations);
  spdlog::info("CUDA memory plan: {}", st.plan.describe());
  init_host_tier(st);
}

kv::KvLayout CudaModelRunner::plan_layout(const ModelConfig& config, const CudaRunnerOptions& options) {
  return runner_kv_layout(config, options);
}

CudaModelRunner::~CudaModelRunner() {
  if (!state_) return;
  cudaSetDevice(state_->options.device);  // a rank may be destroyed from another GPU's thread
  State& st = *state_;
  if (st.stream) cudaStreamSynchronize(st.stream);  // an uncollected launch still writes pinned memory
  free_host_tier(st);
  for (auto& [bucket, exec] : st.graphs) cudaGraphExecDestroy(exec);
  if (st.stream) cudaStreamDestroy(st.stream);
  for (int i = 0; i < 2; ++i) {
    if (st.staging_slots[i]) cudaFreeHost(st.staging_slots[i]);
    if (st.sample_staging_slots[i]) cudaFreeHost(st.sample_staging_slots[i]);
    if (st.launch_out[i]) cudaFreeHost(st.launch_out[i]);
    if (st.staging_free[i]) cudaEventDestroy(st.staging_free[i]);
    if (st.launch_done[i]) cudaEventDestroy(st.launch_done[i]);
  }
}

const ModelConfig& CudaModelRunner::config() const { return state_->config; }
const KvCacheShape& CudaModelRunner::kv_shape() const { return state_->kv_shape; }
const MemoryPlan& CudaModelRunner::memory_plan() const { return state_->plan; }
StepCapacity CudaModelRunner::capacity() const {
  return {state_->limits.max_num_seqs, state_->limits.max_num_tokens, state_->limits.max_model_len};
}
int64_t CudaModelRunner::weight_bytes() const { return static_cast<int64_t>(state_->weights.bytes()); }
void CudaModelRunner::set_cuda_graphs(bool enabled) { state_->options.cuda_graphs = enabled; }
void CudaModelRunner::set_stage_timing(bool enabled) { state_->timer.set_enabled(enabled); }
void CudaModelRunner::time_next_step_by_stage() { state_->timer.request_one_step(); }
bool CudaModelRunner::last_step_device_times(StepDeviceTimes& out) const {
  return state_->timer.last_step(out.busy_s, out.stages);
}

std::vector<std::pair<std::string, double>> CudaModelRunner::take_stage_times(int64_t* num_steps) {
  const StageTimer::Totals t = state_->timer.take();
  if (num_steps) *num_steps = t.steps;
  std::vector<std::pair<std::string, double>> out;
  for (int i = 0; i < static_cast<int>(Stage::kCount); ++i)
    if (t.ms[i] > 0.0) out.emplace_back(stage_name(static_cast<Stage>(i)), t.ms[i]);
  return out;
}

namespace {

// After a change of the kernels a step launches: graphs captured before would replay the old.
void drop_graphs(CudaModelRunner::State& st) {
  OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(st.stream));
  for (auto& [bucket, exec] : st.graphs) cudaGraphExecDestroy(exec);
  st.graphs.clear();
}

}  // namespace

void CudaModelRunner::set_launch_options(bool fused_decode, bool programmatic_launch) {
  drop_graphs(*state_);
  state_->options.fused_decode = fused_decode;
  set_programmatic_launch(programmatic_launch);
}

void CudaModelRunner::set_fused_elementwise(bool fused) {
  drop_graphs(*state_);
  state_->options.fused_elementwise = fused;
}

std::vector<KernelFamily> CudaModelRunner::kernel_families() const {
  const State& st = *state_;
  if (st.tp.comm) return {};
  return {{"sampling", {"fused", "unfused"}, "fused"},
          {"elementwise", {"fused", "separate"}, st.stable_fused_elementwise ? "fused" : "separate"}};
}

void CudaModelRunner::set_kernel_variant(std::string_view family, std::string_view variant) {
  State& st = *state_;
  if (!st.tp.comm && family == "sampling" && (variant == "fused" || variant == "unfused")) {
    st.unfused_sampling = variant == "unfused";
  } else if (!st.tp.comm && family == "elementwise" && (variant == "fused" || variant == "separate")) {
    if ((variant == "fused") != st.options.fused_elementwise) set_fused_elementwise(variant == "fused");
  } else {
    fail(ErrorCode::kInvalidArgument, "the CUDA runner has no kernel variant {} '{}'", family, variant);
  }
}

namespace {

// The decode graph of batch bucket pad_to, captured from `in` (already on the device) the first
// time the bucket is seen.
cudaGraphExec_t decode_graph(CudaModelRunner::State& st, const StepInputs& in, int64_t pad_to) {
  auto it = st.graphs.find(pad_to);
  if (it != st.graphs.end()) return it->second;
  // Splits are fixed at capture, so they are chosen for the longest context a replay may see.
  const int splits = st.decode_splits(pad_to, st.limits.max_model_len);
  st.enqueue_forward(in, splits);  // warm-up: cuBLASLt plans for these shapes exist before capture
  cudaGraph_t g = nullptr;
  OPTIMATE_CUDA_CHECK(cudaStreamBeginCapture(st.stream, cudaStreamCaptureModeThreadLocal));
  try {
    st.enqueue_forward(in, splits);
  } catch (...) {
    cudaStreamEndCapture(st.stream, &g);
    if (g) cudaGraphDestroy(g);
    throw;
  }
  OPTIMATE_CUDA_CHECK(cudaStreamEndCapture(st.stream, &g));
  cudaGraphExec_t exec = nullptr;
  OPTIMATE_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
  cudaGraphDestroy(g);
  st.graphs.emplace(pad_to, exec);
  return exec;
}

void copy_step_inputs(CudaModelRunner::State& st, const StepInputs& in) {
  for (const auto& [offset, count] : in.used) {
    if (count == 0) continue;
    OPTIMATE_CUDA_CHECK(cudaMemcpyAsync(st.step.get() + offset, st.staging() + offset,
                                        count * sizeof(int32_t), cudaMemcpyHostToDevice, st.stream));
  }
}

}  // namespace

void next_staging(CudaModelRunner::State& st) {
  st.staging_slot ^= 1;
  // Long done unless the step two launches back is still copying its inputs.
  OPTIMATE_CUDA_CHECK(cudaEventSynchronize(st.staging_free[st.staging_slot]));
}

void staging_copied(CudaModelRunner::State& st) {
  OPTIMATE_CUDA_CHECK(cudaEventRecord(st.staging_free[st.staging_slot], st.stream));
}

// Leaves the logits and greedy ids of the step's rows in the state's buffers.
int64_t run_step(CudaModelRunner::State& st, const ForwardBatch& batch) {
  bind_device(st);
  if (st.tp.comm && st.tp.comm->generation() != st.comm_generation) {
    // The group was created anew after a failure: graphs hold the old one's collectives.
    OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(st.stream));
    for (auto& [bucket, exec] : st.graphs) cudaGraphExecDestroy(exec);
    st.graphs.clear();
    st.comm_generation = st.tp.comm->generation();
  }
  st.timer.arm_step();
  const int64_t bucket = graph_bucket(static_cast<int64_t>(batch.seqs.size()));
  const bool graph = st.graphs_allowed() && !st.timer.enabled() && is_uniform_decode(batch) &&
                     bucket <= std::min(st.options.max_num_seqs, st.options.max_graph_batch);
  const int64_t pad_to = graph ? bucket : 0;
  next_staging(st);
  const StepInputs in = pack_step(batch, st.limits, st.layout, st.staging(), pad_to, st.last_drawn_rows);
  wait_for_copies(st, batch);
  st.timer.begin_step(st.stream);
  st.timer.mark(Stage::kCopyIn, st.stream);
  copy_step_inputs(st, in);
  staging_copied(st);
  if (in.num_fed_back > 0)
    take_fed_back_tokens(st.step.get() + st.layout.token_ids, in.num_tokens, st.last_drawn, st.stream);
  if (!graph) {
    st.enqueue_forward(in, st.decode_splits(in.num_rows, in.max_ctx));
    return in.num_logits_rows;
  }
  OPTIMATE_CUDA_CHECK(cudaGraphLaunch(decode_graph(st, in, pad_to), st.stream));
  return in.num_seqs;
}

namespace {

// A synchronous call: every launch must have been collected, and its draws are no longer the
// ones a fed-back token names.
void synchronous_step(CudaModelRunner::State& st, const char* call) {
  if (!st.launches.empty())
    fail(ErrorCode::kInternal, "{} with {} launched steps uncollected", call, st.launches.size());
  st.last_drawn_rows = 0;
}

}  // namespace

void CudaModelRunner::capture_decode_graphs() {
  State& st = *state_;
  if (!st.graphs_allowed()) return;
  bind_device(st);
  const int64_t most = std::min(st.options.max_num_seqs, st.options.max_graph_batch);
  const int64_t used_before = device_used_bytes();
  int64_t buckets = 0;
  // Slot 0 at the cache's base precision: the capture writes and reads nothing there.
  const std::vector<int32_t> token = {0},
                             table = {kv::make_entry(kv::precision_code(st.kv_shape.layout.base), 0)};
  for (int64_t b = 1; b <= most; b = graph_bucket(b + 1)) {
    ForwardBatch batch;
    batch.seqs.assign(static_cast<size_t>(b), SeqSlice{token, 0, table, true});
    next_staging(st);
    StepInputs in = pack_step(batch, st.limits, st.layout, st.staging(), b);
    // No cache writes: the warm-up step before the capture runs for real, and block 0 may
    // belong to a sequence.
    std::fill_n(st.staging() + st.layout.slot_mapping, in.num_tokens, -1);
    copy_step_inputs(st, in);
    staging_copied(st);
    decode_graph(st, in, b);
    ++buckets;
  }
  OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(st.stream));
  // Against the memory plan's reserve past the pool (kAfterPoolReserveBytes).
  spdlog::info("decode graphs: {} batch buckets captured, device memory {:+.0f} MiB", buckets,
               static_cast<double>(device_used_bytes() - used_before) / (1024.0 * 1024.0));
}

void CudaModelRunner::forward(const ForwardBatch& batch, std::vector<float>& logits) {
  State& st = *state_;
  synchronous_step(st, "forward");
  const int64_t rows = run_step(st, batch);
  const int64_t V = st.config.vocab_size, chunk = st.options.max_num_seqs;
  logits.resize(static_cast<size_t>(rows * V));
  // The step computed the first chunk of rows; all_logits slices may want more than the
  // logits buffer holds, so the rest go through the LM head a chunk at a time, each copied out
  // before the next overwrites the buffer (same stream).
  for (int64_t first = 0; first < rows; first += chunk) {
    const int64_t n = std::min(chunk, rows - first);
    if (first > 0) st.enqueue_lm_head(first, n);
    if (first == 0) st.timer.mark(Stage::kCopyOut, st.stream);
    OPTIMATE_CUDA_CHECK(cudaMemcpyAsync(logits.data() + first * V, st.logits.get(), n * V * sizeof(float),
                                        cudaMemcpyDeviceToHost, st.stream));
  }
  if (rows == 0) st.timer.mark(Stage::kCopyOut, st.stream);
  st.timer.end_step(st.stream);  // its last event follows the copy, not the host's wake-up
  OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(st.stream));
}

namespace {

void refuse_all_logits(const ForwardBatch& batch, const char* call) {
  for (size_t i = 0; i < batch.seqs.size(); ++i)
    if (batch.seqs[i].all_logits)
      fail(ErrorCode::kInvalidArgument, "{}: slice {} asks for all logits; use forward", call, i);
}

}  // namespace

void CudaModelRunner::forward_greedy(const ForwardBatch& batch, std::vector<int32_t>& token_ids) {
  refuse_all_logits(batch, "forward_greedy");
  State& st = *state_;
  synchronous_step(st, "forward_greedy");
  const int64_t rows = run_step(st, batch);
  token_ids.resize(static_cast<size_t>(rows));
  st.timer.mark(Stage::kCopyOut, st.stream);
  if (rows > 0)
    OPTIMATE_CUDA_CHECK(cudaMemcpyAsync(token_ids.data(), st.greedy.get(), rows * sizeof(int32_t),
                                        cudaMemcpyDeviceToHost, st.stream));
  st.timer.end_step(st.stream);  // its last event follows the copy, not the host's wake-up
  OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(st.stream));
}

bool CudaModelRunner::forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows,
                                     std::vector<int32_t>& token_ids) {
  State& st = *state_;
  synchronous_step(st, "forward_sample");
  const int32_t* drawn = run_step_and_sample(st, batch, rows, "forward_sample");
  const int64_t n = static_cast<int64_t>(rows.size());
  token_ids.resize(static_cast<size_t>(n));
  st.timer.mark(Stage::kCopyOut, st.stream);
  if (n > 0)
    OPTIMATE_CUDA_CHECK(cudaMemcpyAsync(token_ids.data(), drawn, n * sizeof(int32_t),
                                        cudaMemcpyDeviceToHost, st.stream));
  st.timer.end_step(st.stream);  // its last event follows the copy, not the host's wake-up
  OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(st.stream));
  return true;
}

}  // namespace optimate::cuda
