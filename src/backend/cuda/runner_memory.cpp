// How the CUDA runner sizes its memory: the activation buffers a configuration needs, the steps
// it runs once at start on a one-page KV arena so that the memory plan counts what they made
// the runtime allocate (measured, as vLLM's profile run is), and the KV pool from what is left
// of the budget.
#include <algorithm>
#include <span>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernel_paths.h"
#include "backend/cuda/kv_requantize.h"
#include "backend/cuda/moe_layer.h"
#include "backend/cuda/paged_attention.h"
#include "backend/cuda/runner_state.h"
#include "core/error.h"
#include "core/logging.h"

namespace optimate::cuda {
namespace {

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// What a step makes the runtime allocate (kernel modules loaded on first launch, local memory
// for the widest kernel, cuBLASLt's own state), allowed for where no step is profiled: before the
// weights are loaded, and on a tensor-parallel rank, whose steps meet the other ranks'.
constexpr int64_t kUnprofiledRuntimeBytes = int64_t{256} << 20;

struct DeviceMemory {
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
};

DeviceMemory device_memory() {
  size_t free_b = 0, total_b = 0;
  OPTIMATE_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return {static_cast<int64_t>(total_b), static_cast<int64_t>(free_b)};
}

// FP8 weights as a way out of a plan that does not fit: the GPU runs them and the weights are
// not FP8 already.
bool fp8_weights_possible(const CudaRunnerOptions& o) {
  return device_kernel_paths(o.device).fp8 && o.quantization != WeightQuantization::kFp8;
}

}  // namespace

int64_t device_used_bytes() {
  const DeviceMemory m = device_memory();
  return m.total_bytes - m.free_bytes;
}

ActivationPlan plan_activations(const ModelConfig& c, const CudaRunnerOptions& o, int num_sms,
                                int64_t max_model_len, const parallel::TpPartition* tp) {
  const int64_t T = o.max_num_batched_tokens, S = o.max_num_seqs;
  const int64_t q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
  ActivationPlan p;
  p.logits_floats = S * c.vocab_size;
  p.mlp_logits_bytes = p.logits_floats * 4;
  if (c.is_moe()) {
    // The experts' grouped GEMMs run over the whole step, as vLLM's fused MoE does below its
    // 32,768-token chunk: a chunk would read every expert's weights again for fewer rows each.
    p.moe_bytes = MoeBuffers::bytes(c, T);
  } else {
    // The MLP's rows at once: the chunk whose gate_up and act fit where the logits go, at least
    // kMlpChunkRows, in multiples of 256 rows; a step of fewer tokens runs whole.
    const int64_t inter = c.intermediate_size;
    const int64_t row_bytes = 3 * inter * 2;  // gate_up and act, bf16
    const int64_t fit_rows = p.logits_floats * 4 / row_bytes / 256 * 256;
    p.mlp_chunk_rows = std::min(T, std::max(kMlpChunkRows, fit_rows));
    p.act_offset = round_up(p.mlp_chunk_rows * 2 * inter * 2, 256);
    p.mlp_logits_bytes = std::max(p.act_offset + p.mlp_chunk_rows * inter * 2, p.mlp_logits_bytes);
  }

  StepLimits meta;
  meta.max_num_tokens = T;
  meta.max_num_seqs = S;
  meta.max_blocks_per_seq = (max_model_len + o.block_size - 1) / o.block_size;
  int64_t b = 0;
  b += T * c.hidden_size * 4;                          // residual
  b += T * c.hidden_size * 2 * 2;                      // normed, branch
  b += T * (q_dim + 2 * kv_dim) * 2 + T * q_dim * 2;   // qkv, attn
  b += p.mlp_logits_bytes;                             // gate_up and act, or logits
  b += p.moe_bytes;                                    // routing and the experts' grouped rows
  b += S * 4 * 3 + S * static_cast<int64_t>(sizeof(GpuSampleRow));  // greedy, sampled ids, sample rows
  b += paged_attention_split_workspace_floats(decode_attention_shape(c, o), num_sms) * 4;
  b += StepLayout(meta).total * 4;                     // step metadata
  b += kGemvMaxRows * 2 * c.num_kv_heads * 4;          // the fused QKV GEMV's row counters
  if (o.kv_finest_precision)                           // requantize scratch
    b += kv_requantize_scratch_bytes({nullptr, 0, 0, c.num_layers, c.num_kv_heads, o.block_size, c.head_dim},
                                     kRequantizeBatchOps);
  if (tp)                                              // partial sums, logits slice and gather
    b += T * c.hidden_size * 4 + (1 + tp->num_ranks) * S * tp->vocab_per_rank * 4;
  b += int64_t{32} << 20;                              // cuBLASLt workspace
  if (o.quantization == WeightQuantization::kFp8)      // FP8 activations, workspace and sums
    b += Fp8Gemm::device_bytes(T, runner_fp8_max_k(c));
  p.buffer_bytes = b;
  return p;
}

void check_runner_options(const ModelConfig& c, const CudaRunnerOptions& o) {
  if (c.head_dim != 64 && c.head_dim != 128)
    fail(ErrorCode::kUnsupported, "CUDA backend: head_dim {} is not supported (64 or 128)", c.head_dim);
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0 || c.num_heads / c.num_kv_heads > 8)
    fail(ErrorCode::kUnsupported, "CUDA backend: {} heads over {} KV heads (groups up to 8)",
         c.num_heads, c.num_kv_heads);
  check_moe_supported(c);
  if (o.block_size <= 0 || o.max_num_seqs <= 0 || o.max_num_batched_tokens <= 0)
    fail(ErrorCode::kInvalidArgument, "CUDA runner: block_size {}, max_num_seqs {} and "
         "max_num_batched_tokens {} must be positive", o.block_size, o.max_num_seqs,
         o.max_num_batched_tokens);
}

MemoryPlanInput runner_memory_plan_input(const ModelConfig& c, const CudaRunnerOptions& o, int64_t weight_bytes,
                                         int64_t activation_bytes, int64_t total_bytes, int64_t free_bytes,
                                         bool fp8_weights_possible) {
  const int64_t len = resolve_max_model_len(c, o);
  const kv::KvLayout layout = runner_kv_layout(c, o);
  MemoryPlanInput in;
  in.total_bytes = total_bytes;
  in.free_bytes = free_bytes;
  in.gpu_memory_utilization = o.gpu_memory_utilization;
  in.weight_bytes = weight_bytes;
  in.activation_bytes = activation_bytes;
  in.kv_slot_bytes = c.num_layers * 2 * layout.slot_bytes;
  in.kv_page_slots = layout.page_slots;
  in.min_kv_slots = (len + o.block_size - 1) / o.block_size * layout.slots_for(layout.base);
  in.requested_kv_slots = o.num_kv_blocks;
  in.max_model_len = len;
  in.block_size = o.block_size;
  in.slots_per_block = layout.slots_for(layout.base);
  in.fp8_weights_possible = fp8_weights_possible;
  in.kv_bf16 = layout.base == kv::KvPrecision::kBF16;
  return in;
}

MemoryPlan plan_memory_before_load(const ModelConfig& c, const CudaRunnerOptions& o, int num_sms,
                                   int64_t weight_bytes, int64_t total_bytes, int64_t free_bytes,
                                   bool fp8_weights_possible) {
  check_runner_options(c, o);
  const int64_t activations =
      plan_activations(c, o, num_sms, resolve_max_model_len(c, o)).buffer_bytes + kUnprofiledRuntimeBytes;
  // The weights and activations are still to be allocated before the pool.
  return plan_memory(runner_memory_plan_input(c, o, weight_bytes, activations, total_bytes,
                                              free_bytes - weight_bytes - activations, fp8_weights_possible));
}

void check_memory_fits(const ModelConfig& c, const CudaRunnerOptions& o, int num_sms, int64_t weight_bytes) {
  const DeviceMemory m = device_memory();
  plan_memory_before_load(c, o, num_sms, weight_bytes, m.total_bytes, m.free_bytes, fp8_weights_possible(o));
}

void set_kv_pool(CudaModelRunner::State& st, int64_t num_slots) {
  const ModelConfig& c = st.config;
  const CudaRunnerOptions& o = st.options;
  const kv::KvLayout layout = runner_kv_layout(c, o);
  // Step write targets carry slot * block_size + token below the entry's precision bits.
  if (num_slots * o.block_size > kv::kEntrySlotMask)
    fail(ErrorCode::kInvalidArgument, "a KV cache of {} slots of {} tokens is more than block-table entries "
         "address ({} token rows); set num-kv-blocks lower", num_slots, o.block_size, kv::kEntrySlotMask);
  st.kv_cache.reset();  // the profile's arena goes before the pool is taken
  st.kv_shape = {c.num_layers, num_slots, o.block_size, c.num_kv_heads, c.head_dim, layout};
  st.kv_shape.host_tier = o.host_tier;
  st.kv_cache.resize(static_cast<size_t>(c.num_layers * 2 * num_slots * layout.slot_bytes));
  st.limits.num_kv_slots = num_slots;
}

namespace {

// A pass of each kind of step at its widest, greedy and sampled, on an arena of one page: every
// block-table entry names slot 0. Graphs stay off (a graph would keep the arena's address).
void profile_steps(CudaModelRunner::State& st) {
  const bool graphs = st.options.cuda_graphs;
  st.options.cuda_graphs = false;
  const StepLimits& lim = st.limits;
  const int64_t T = lim.max_num_tokens, S = lim.max_num_seqs, len = lim.max_model_len;
  const std::vector<int32_t> tokens(static_cast<size_t>(std::max<int64_t>(T, 1)), 0);
  const std::vector<int32_t> table(static_cast<size_t>(lim.max_blocks_per_seq),
                                   kv::make_entry(kv::precision_code(st.kv_shape.layout.base), 0));
  const std::span<const int32_t> all_tokens(tokens), all_table(table);
  SamplingParams sampled;
  sampled.temperature = 1.0f;
  sampled.top_p = 0.9f;
  sampled.top_k = 40;
  auto step = [&](const ForwardBatch& batch, bool sample) {
    std::vector<SampleSpec> rows(batch.seqs.size());
    for (SampleSpec& r : rows) r.params = &sampled;
    if (sample) run_step_and_sample(st, batch, rows, "memory profile");
    else run_step(st, batch);
    OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(st.stream));
  };
  try {
    ForwardBatch prefill;  // the widest step: max_num_batched_tokens prompt tokens
    for (int64_t first = 0; first < T && static_cast<int64_t>(prefill.seqs.size()) < S; first += len) {
      const int64_t n = std::min(len, T - first);
      prefill.seqs.push_back({all_tokens.first(static_cast<size_t>(n)), 0,
                              all_table.first(static_cast<size_t>((n + lim.block_size - 1) / lim.block_size)), true});
    }
    step(prefill, false);
    ForwardBatch decode;  // max_num_seqs decode rows, sampled; then one row (the fused path)
    decode.seqs.assign(static_cast<size_t>(S), SeqSlice{all_tokens.first(1), 0, all_table.first(1), true});
    step(decode, true);
    // The sampling family's unfused variant, which the kernels optimizer may choose later:
    // its scratch is made now, inside the profile.
    const bool unfused = st.unfused_sampling;
    st.unfused_sampling = true;
    step(decode, true);
    st.unfused_sampling = unfused;
    decode.seqs.resize(1);
    step(decode, false);
  } catch (...) {
    st.options.cuda_graphs = graphs;
    throw;
  }
  st.options.cuda_graphs = graphs;
  st.last_drawn_rows = 0;
}

}  // namespace

void plan_kv_pool(CudaModelRunner::State& st, int64_t used_before_buffers, const ActivationPlan& activations) {
  const kv::KvLayout layout = runner_kv_layout(st.config, st.options);
  int64_t activation_bytes = activations.buffer_bytes + kUnprofiledRuntimeBytes;
  if (!st.tp.comm) {
    set_kv_pool(st, layout.page_slots);
    profile_steps(st);
    // Never below the buffers themselves: another process may have freed memory meanwhile.
    activation_bytes = std::max(activations.buffer_bytes,
                                device_used_bytes() - used_before_buffers - static_cast<int64_t>(st.kv_cache.bytes()));
    st.kv_cache.reset();
  }
  const DeviceMemory m = device_memory();
  st.plan = plan_memory(runner_memory_plan_input(st.config, st.options, static_cast<int64_t>(st.weights.bytes()),
                                                 activation_bytes, m.total_bytes, m.free_bytes,
                                                 fp8_weights_possible(st.options)));
  set_kv_pool(st, st.plan.num_kv_slots);
}

}  // namespace optimate::cuda
