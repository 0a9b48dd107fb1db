// The memory plan: KV slots (whole pages of them) from the utilization fraction, and a clear
// error when the model does not fit. Pure host arithmetic, so it runs without a GPU too.
#include "backend/cuda/memory_plan.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace optimate::cuda {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(MemoryPlan, KvPoolGetsWhatTheBudgetLeaves) {
  MemoryPlanInput in;
  in.total_bytes = 140 * kGiB;
  in.free_bytes = 139 * kGiB;  // 1 GiB held by the context / other processes
  in.gpu_memory_utilization = 0.9;
  in.weight_bytes = 16 * kGiB;
  in.activation_bytes = 2 * kGiB;
  in.kv_slot_bytes = 2 * 1024 * 1024;  // Llama-3-8B: 32 layers x 2 x 8 heads x 16 x 128 x 2 B
  in.min_kv_slots = 512;
  const MemoryPlan plan = plan_memory(in);
  EXPECT_EQ(plan.other_bytes, 1 * kGiB);
  EXPECT_EQ(plan.num_kv_slots, (static_cast<int64_t>(140 * kGiB * 0.9) - 19 * kGiB) / in.kv_slot_bytes);
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
  try {
    plan_memory(in);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("whole pages of 4"), std::string::npos) << e.what();
  }
}

TEST(MemoryPlan, ResidentWeightsAreNotCountedTwice) {
  MemoryPlanInput in;
  in.total_bytes = 100 * kGiB;
  in.free_bytes = 80 * kGiB;  // 16 GiB weights + 4 GiB other
  in.weights_resident = true;
  in.gpu_memory_utilization = 0.5;
  in.weight_bytes = 16 * kGiB;
  in.activation_bytes = 0;
  in.kv_slot_bytes = kGiB;
  EXPECT_EQ(plan_memory(in).num_kv_slots, 30);
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
  try {
    plan_memory(in);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("does not fit"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gpu_memory_utilization 0.9"), std::string::npos) << e.what();
  }
}

TEST(MemoryPlan, RejectsFractionOutsideZeroOne) {
  MemoryPlanInput in;
  in.total_bytes = kGiB;
  in.free_bytes = kGiB;
  in.kv_slot_bytes = 1024;
  in.gpu_memory_utilization = 1.5;
  EXPECT_THROW(plan_memory(in), Error);
}

}  // namespace
}  // namespace optimate::cuda
