// The runner's memory plan on GPUs smaller than an H200, simulated on the host: the memory a
// card reports (total, and free once the CUDA context exists) goes through the same arithmetic
// the runner applies at start before the weights are loaded (plan_memory_before_load). The
// budget counts only this instance's memory, as vLLM's does: a model that fits starts with the
// KV cache the rest allows, another process on the card only has to leave the pool room, and
// what does not fit is refused naming the part that does not and the settings that would make it.
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/cuda_weights.h"
#include "backend/cuda/fp8_weights.h"
#include "backend/cuda/memory_plan.h"
#include "backend/cuda/runner_state.h"
#include "core/error.h"
#include "model/weights.h"

namespace optimate::cuda {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kContextMiB = 420;  // what creating the CUDA context takes before the plan

// Meta-Llama-3-8B's config.json (configs/models/llama-3-8b).
ModelConfig llama3_8b() {
  return load_model_header(std::string(OPTIMATE_TEST_DATA_DIR) + "/../../configs/models/llama-3-8b").config;
}

// The engine's defaults as the runner receives them.
CudaRunnerOptions engine_defaults() {
  CudaRunnerOptions o;
  o.max_num_batched_tokens = 2048;
  o.max_num_seqs = 256;
  return o;
}

struct Card {
  int64_t total_mib;
  int sms;
  bool fp8;  // compute capability 8.9 or later
};
constexpr Card kA10{23028, 72, false};
constexpr Card kL4{23034, 58, true};
constexpr Card kRtx4080{16376, 76, true};
constexpr Card kA4000{16376, 48, false};
constexpr Card kH200{143771, 132, true};

// `others_mib`: what other processes hold on the card.
MemoryPlan plan_on(const Card& card, const ModelConfig& c, const CudaRunnerOptions& o, int64_t others_mib = 0) {
  const int64_t total = card.total_mib * kMiB;
  return plan_memory_before_load(c, o, card.sms, cuda_weight_bytes(c), total,
                                 total - (kContextMiB + others_mib) * kMiB, card.fp8);
}

std::string fit_error(const Card& card, const ModelConfig& c, const CudaRunnerOptions& o, int64_t others_mib = 0) {
  try {
    plan_on(card, c, o, others_mib);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    return e.what();
  }
  return "";
}

// Llama-3-8B in bf16 (16.1 GB of weights) on a 24 GB card starts, with the KV cache the rest
// of the budget holds: at least one 8192-token sequence, a small fraction of an H200's.
TEST(MemoryFit, Llama3_8bOnA24GbCardStartsWithASmallerKvCache) {
  const ModelConfig c = llama3_8b();
  const CudaRunnerOptions o = engine_defaults();
  const int64_t seq_slots = 8192 / o.block_size;
  for (const Card& card : {kA10, kL4}) {
    const MemoryPlan plan = plan_on(card, c, o);
    EXPECT_GE(plan.num_kv_slots, seq_slots);
    EXPECT_LE(plan.budget_bytes, static_cast<int64_t>(0.9 * static_cast<double>(card.total_mib * kMiB)));
    EXPECT_LE(plan.weight_bytes + plan.activation_bytes + plan.kv_bytes(), plan.budget_bytes);
    // The pool fits what the context leaves free once the weights and activations are in.
    EXPECT_LE(plan.kv_bytes() + plan.reserve_bytes,
              (card.total_mib - kContextMiB) * kMiB - plan.weight_bytes - plan.activation_bytes);
    EXPECT_LT(plan.num_kv_slots * 10, plan_on(kH200, c, o).num_kv_slots);
  }
}

// On 16 GB the weights alone are more than the budget: the error says so, with FP8 weights as a
// way out only where the GPU runs them.
TEST(MemoryFit, WeightsLargerThanTheCardAreNamed) {
  const ModelConfig c = llama3_8b();
  const std::string ada = fit_error(kRtx4080, c, engine_defaults());
  EXPECT_NE(ada.find("its weights take 14.96 GiB"), std::string::npos) << ada;
  EXPECT_NE(ada.find("--quantization fp8"), std::string::npos) << ada;
  EXPECT_NE(ada.find("--tensor-parallel-size"), std::string::npos) << ada;
  const std::string ampere = fit_error(kA4000, c, engine_defaults());
  EXPECT_NE(ampere.find("its weights take 14.96 GiB"), std::string::npos) << ampere;
  EXPECT_EQ(ampere.find("fp8"), std::string::npos) << ampere;
  // FP8 weights (what --quantization fp8 gives the runner) fit the same card.
  CudaRunnerOptions fp8 = engine_defaults();
  fp8.quantization = WeightQuantization::kFp8;
  const int64_t total = kRtx4080.total_mib * kMiB;
  EXPECT_GT(plan_memory_before_load(c, fp8, kRtx4080.sms, cuda_fp8_weight_bytes(c), total, total - kContextMiB * kMiB,
                                    false)
                .num_kv_slots,
            0);
}

// A context of 131072 tokens needs 16 GiB of bf16 KV for one sequence, more than an A10 has
// left: the error names the context length that does fit and a quantized cache.
TEST(MemoryFit, AContextLongerThanTheKvCacheNamesWhatFits) {
  CudaRunnerOptions o = engine_defaults();
  o.max_model_len = 131072;
  const std::string m = fit_error(kA10, llama3_8b(), o);
  EXPECT_NE(m.find("the KV cache does not fit"), std::string::npos) << m;
  EXPECT_NE(m.find("one sequence of 131072 tokens (--max-model-len) needs 16.00 GiB"), std::string::npos) << m;
  EXPECT_NE(m.find("--kv-cache-dtype int8"), std::string::npos) << m;
  // The length it names starts (its activations' block tables are a little smaller, so a few
  // tokens more would too; a thousand more do not).
  const std::string::size_type at = m.find("lower --max-model-len to ");
  ASSERT_NE(at, std::string::npos) << m;
  const int64_t fits = std::stoll(m.substr(at + 25));
  EXPECT_GT(fits, 8192);
  EXPECT_LT(fits, 131072);
  o.max_model_len = fits;
  EXPECT_NO_THROW(plan_on(kA10, llama3_8b(), o));
  o.max_model_len = fits + 1024;
  EXPECT_THROW(plan_on(kA10, llama3_8b(), o), Error);
}

// The MLP runs in chunks, so a step of 65536 tokens starts beside the weights on an A10 (its
// activations are a third of what full-width MLP buffers took); one of 131072 does not, and the
// error names the step size.
TEST(MemoryFit, ActivationsPastTheBudgetNameTheStepSize) {
  CudaRunnerOptions o = engine_defaults();
  o.max_num_batched_tokens = 65536;
  EXPECT_GE(plan_on(kA10, llama3_8b(), o).num_kv_slots, 8192 / o.block_size);
  o.max_num_batched_tokens = 131072;
  const std::string m = fit_error(kA10, llama3_8b(), o);
  EXPECT_NE(m.find("the activations of a step"), std::string::npos) << m;
  EXPECT_NE(m.find("--max-num-batched-tokens"), std::string::npos) << m;
}

// Another process on the card is not counted against this instance's share: holding 1 GiB it
// leaves the A10's KV cache as it was. Holding 3 GiB it leaves the pool no room in the free
// memory: the error says what the others hold and names the share that fits, which starts.
TEST(MemoryFit, OtherProcessesOnlyHaveToLeaveThePoolRoom) {
  const ModelConfig c = llama3_8b();
  CudaRunnerOptions o = engine_defaults();
  EXPECT_EQ(plan_on(kA10, c, o, 1024).num_kv_slots, plan_on(kA10, c, o).num_kv_slots);
  const std::string m = fit_error(kA10, c, o, 3072);
  EXPECT_NE(m.find("left free"), std::string::npos) << m;
  EXPECT_NE(m.find("other processes and this one's CUDA context hold 3.41 GiB"), std::string::npos) << m;
  const std::string::size_type at = m.find("lower --gpu-memory-utilization to ");
  ASSERT_NE(at, std::string::npos) << m;
  o.gpu_memory_utilization = std::stod(m.substr(at + 34));
  EXPECT_LT(o.gpu_memory_utilization, 0.9);
  EXPECT_GE(plan_on(kA10, c, o, 3072).num_kv_slots, 8192 / o.block_size);
}

}  // namespace
}  // namespace optimate::cuda
