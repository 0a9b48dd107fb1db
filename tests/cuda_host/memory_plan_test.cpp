// The memory plan: KV slots (whole pages of them) from the utilization fraction, counting only
// this instance's memory, and a clear error when the model or the pool does not fit. Pure host
// arithmetic, so it runs without a GPU too.
#include "backend/cuda/memory_plan.h"

#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/runner_state.h"
#include "core/error.h"
#include "model/weights.h"

namespace optimate::cuda {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;

void expect_error(const MemoryPlanInput& in, ErrorCode code, const std::string& text) {
  try {
    plan_memory(in);
    FAIL() << "expected an error containing \"" << text << "\"";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code);
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

// vLLM's rule: the pool is the fraction of the card less this instance's weights and
// activations; the CUDA context and other processes' memory only have to leave it room.
TEST(MemoryPlan, KvPoolGetsWhatTheBudgetLeavesOfThisInstancesMemory) {
  MemoryPlanInput in;
  in.total_bytes = 140 * kGiB;
  in.free_bytes = 100 * kGiB;  // 40 GiB held by the context, another process and our weights
  in.gpu_memory_utilization = 0.5;
  in.weight_bytes = 16 * kGiB;
  in.activation_bytes = 2 * kGiB;
  in.kv_slot_bytes = 2 * 1024 * 1024;  // Llama-3-8B: 32 layers x 2 x 8 heads x 16 x 128 x 2 B
  in.min_kv_slots = 512;
  const MemoryPlan plan = plan_memory(in);
  EXPECT_EQ(plan.num_kv_slots, (70 * kGiB - 18 * kGiB) / in.kv_slot_bytes);
  EXPECT_EQ(plan.reserve_bytes, kAfterPoolReserveBytes);
}

// A dynamic cache's pool holds whole pages; a slot count asked for must be whole pages too.
TEST(MemoryPlan, PoolHoldsWholePages) {
  MemoryPlanInput in;
  in.total_bytes = 10 * kGiB;
  in.free_bytes = 10 * kGiB;
  in.gpu_memory_utilization = 0.5;
  in.kv_slot_bytes = 1000 * 1000;  // 5 GiB / 1 MB = 5368 slots, 1342 pages of 4
  in.kv_page_slots = 4;
  in.min_kv_slots = 3;             // rounds up to one page
  EXPECT_EQ(plan_memory(in).num_kv_slots, 1342 * 4);
  in.requested_kv_slots = 400;
  EXPECT_EQ(plan_memory(in).num_kv_slots, 400);
  in.requested_kv_slots = 402;
  expect_error(in, ErrorCode::kInvalidArgument, "whole pages of 4");
}

TEST(MemoryPlan, ModelThatDoesNotFitIsAClearError) {
  MemoryPlanInput in;
  in.total_bytes = 24 * kGiB;
  in.free_bytes = 24 * kGiB;
  in.gpu_memory_utilization = 0.9;
  in.weight_bytes = 30 * kGiB;
  in.activation_bytes = kGiB;
  in.kv_slot_bytes = 2 * 1024 * 1024;
  in.min_kv_slots = 512;
  expect_error(in, ErrorCode::kResourceExhausted, "does not fit in GPU memory");
  expect_error(in, ErrorCode::kResourceExhausted, "gpu_memory_utilization 0.9");
}

// Another process holds what the budget would give the pool: the error says so, with the share
// (or, for a slot count asked for, the count) whose pool the free memory holds, instead of the
// allocation failing.
TEST(MemoryPlan, PoolThatOtherProcessesLeaveNoRoomForIsAClearError) {
  MemoryPlanInput in;
  in.total_bytes = 80 * kGiB;
  in.free_bytes = 10 * kGiB;  // our 16 GiB of weights, 1 GiB of activations, 53 GiB someone else's
  in.gpu_memory_utilization = 0.5;
  in.weight_bytes = 16 * kGiB;
  in.activation_bytes = kGiB;
  in.kv_slot_bytes = 2 * 1024 * 1024;
  in.min_kv_slots = 512;
  expect_error(in, ErrorCode::kResourceExhausted, "does not fit in the 9.97 GiB of GPU memory left free");
  expect_error(in, ErrorCode::kResourceExhausted, "other processes and this one's CUDA context hold 53.00 GiB");
  // (17 GiB + 9.97 GiB) / 80 GiB, in hundredths: its pool of 9.4 GiB fits.
  expect_error(in, ErrorCode::kResourceExhausted, "lower --gpu-memory-utilization to 0.33 or less");
  in.gpu_memory_utilization = 0.33;
  EXPECT_EQ(plan_memory(in).num_kv_slots, (static_cast<int64_t>(80 * kGiB * 0.33) - 17 * kGiB) / in.kv_slot_bytes);
  in.gpu_memory_utilization = 0.5;
  in.requested_kv_slots = 8192;  // 16 GiB: within the budget, not the free memory
  expect_error(in, ErrorCode::kResourceExhausted, "lower --num-kv-blocks to 5104 or less");
  in.requested_kv_slots = 4096;  // 8 GiB: fits
  EXPECT_EQ(plan_memory(in).num_kv_slots, 4096);
  // Not even one full-length sequence fits what is free: no share would help.
  in.requested_kv_slots = 0;
  in.free_bytes = kGiB / 2;
  expect_error(in, ErrorCode::kResourceExhausted, "one full-length sequence needs 1.00 GiB of KV; free the GPU");
}

TEST(MemoryPlan, RejectsFractionOutsideZeroOne) {
  MemoryPlanInput in;
  in.total_bytes = kGiB;
  in.free_bytes = kGiB;
  in.kv_slot_bytes = 1024;
  in.gpu_memory_utilization = 1.5;
  EXPECT_THROW(plan_memory(in), Error);
}

// A model's config.json (configs/models/NAME).
ModelConfig model_config(const std::string& name) {
  return load_model_header(std::string(OPTIMATE_TEST_DATA_DIR) + "/../../configs/models/" + name).config;
}

ModelConfig llama3_8b() { return model_config("llama-3-8b"); }

// The MLP of a step runs in chunks whose buffers share memory with the logits: at 8192-token
// steps and 512 sequences (the KV-bound configuration) the activations take well under the 1.1
// GiB vLLM's profile finds for the same shape, so the pool is at least vLLM's at a fraction.
TEST(ActivationPlan, MlpChunksShareTheLogitsMemory) {
  CudaRunnerOptions o;
  o.max_num_batched_tokens = 8192;
  o.max_num_seqs = 512;
  const ActivationPlan p = plan_activations(llama3_8b(), o, 132, 8192);
  EXPECT_EQ(p.logits_floats, 512 * 128256);
  EXPECT_GE(p.mlp_chunk_rows, kMlpChunkRows);
  EXPECT_LT(p.mlp_chunk_rows, 8192);
  EXPECT_EQ(p.mlp_chunk_rows % 256, 0);
  // gate_up and act of a chunk fit where the logits go: the shared buffer is the logits'.
  EXPECT_LE(p.act_offset + p.mlp_chunk_rows * 14336 * 2, p.logits_floats * 4);
  EXPECT_EQ(p.mlp_logits_bytes, p.logits_floats * 4);
  EXPECT_LT(p.buffer_bytes, 800 * kMiB) << p.buffer_bytes / kMiB << " MiB";
}

// Few sequences: the logits are small, and the chunk's own buffers set the size.
TEST(ActivationPlan, SmallLogitsLeaveTheChunkItsOwnBuffer) {
  CudaRunnerOptions o;
  o.max_num_batched_tokens = 8192;
  o.max_num_seqs = 8;
  const ActivationPlan p = plan_activations(llama3_8b(), o, 132, 8192);
  EXPECT_EQ(p.mlp_chunk_rows, kMlpChunkRows);
  EXPECT_EQ(p.mlp_logits_bytes, p.act_offset + kMlpChunkRows * 14336 * 2);
  o.max_num_batched_tokens = 512;  // a step narrower than a chunk runs whole
  EXPECT_EQ(plan_activations(llama3_8b(), o, 132, 8192).mlp_chunk_rows, 512);
}

// Qwen3-30B-A3B's experts run over the whole step in buffers of their own, which the plan
// counts; its logits alone take the shared allocation.
TEST(ActivationPlan, ExpertsRunTheWholeStepInTheirOwnBuffers) {
  const ModelConfig c = model_config("qwen3-30b-a3b");
  ASSERT_TRUE(c.is_moe());
  ASSERT_EQ(c.moe.expert_intermediate_size, 768);
  CudaRunnerOptions o;
  o.max_num_batched_tokens = 8192;
  o.max_num_seqs = 256;
  const ActivationPlan p = plan_activations(c, o, 132, 8192);
  EXPECT_EQ(p.mlp_chunk_rows, 0);
  EXPECT_EQ(p.mlp_logits_bytes, p.logits_floats * 4);
  EXPECT_EQ(p.moe_bytes, MoeBuffers::bytes(c, 8192));
  // Each token's 8 experts: SiLU(gate) * up of 768 and an output of 2048, bf16.
  EXPECT_GT(p.moe_bytes, int64_t{8192} * 8 * (768 + 2048) * 2);
  EXPECT_GT(p.buffer_bytes, p.moe_bytes + p.mlp_logits_bytes);
}

}  // namespace
}  // namespace optimate::cuda
