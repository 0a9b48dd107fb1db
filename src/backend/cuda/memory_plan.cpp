#include "backend/cuda/memory_plan.h"

#include <fmt/format.h>

#include "core/error.h"

namespace optimate::cuda {
namespace {

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

std::string MemoryPlan::describe() const {
  return fmt::format(
      "budget {:.2f} GiB: other processes {:.2f} GiB, weights {:.2f} GiB, activations {:.2f} GiB, "
      "KV cache {} slots x {:.3f} MiB{} = {:.2f} GiB",
      gib(budget_bytes), gib(other_bytes), gib(weight_bytes), gib(activation_bytes),
      num_kv_slots, static_cast<double>(kv_slot_bytes) / (1024.0 * 1024.0),
      kv_page_slots > 1 ? fmt::format(" (pages of {})", kv_page_slots) : std::string(),
      gib(num_kv_slots * kv_slot_bytes));
}

MemoryPlan plan_memory(const MemoryPlanInput& in) {
  if (!(in.gpu_memory_utilization > 0.0 && in.gpu_memory_utilization <= 1.0))
    fail(ErrorCode::kInvalidArgument, "gpu_memory_utilization must be in (0, 1], got {}",
         in.gpu_memory_utilization);
  if (in.kv_slot_bytes <= 0 || in.kv_page_slots <= 0 || in.total_bytes <= 0)
    fail(ErrorCode::kInvalidArgument, "memory plan needs positive sizes (kv slot {} B, pages of {} slots, "
         "total {} B)", in.kv_slot_bytes, in.kv_page_slots, in.total_bytes);
  if (in.requested_kv_slots < 0 || in.requested_kv_slots % in.kv_page_slots != 0)
    fail(ErrorCode::kInvalidArgument, "num-kv-blocks {} must be whole pages of {} KV slots",
         in.requested_kv_slots, in.kv_page_slots);
  MemoryPlan plan;
  plan.budget_bytes = static_cast<int64_t>(static_cast<double>(in.total_bytes) *
                                           in.gpu_memory_utilization);
  const int64_t used = in.total_bytes - in.free_bytes;
  plan.other_bytes = in.weights_resident ? std::max<int64_t>(0, used - in.weight_bytes) : used;
  plan.weight_bytes = in.weight_bytes;
  plan.activation_bytes = in.activation_bytes;
  plan.kv_slot_bytes = in.kv_slot_bytes;
  plan.kv_page_slots = in.kv_page_slots;
  const int64_t left =
      plan.budget_bytes - plan.other_bytes - plan.weight_bytes - plan.activation_bytes;
  const int64_t page_bytes = in.kv_slot_bytes * in.kv_page_slots;
  const int64_t fit_slots = left > 0 ? left / page_bytes * in.kv_page_slots : 0;
  const int64_t min_slots = (in.min_kv_slots + in.kv_page_slots - 1) / in.kv_page_slots * in.kv_page_slots;
  const int64_t need = std::max<int64_t>(min_slots, in.requested_kv_slots);
  if (fit_slots < need) {
    fail(ErrorCode::kResourceExhausted,
         "the model does not fit in GPU memory: weights {:.2f} GiB + activations {:.2f} GiB + "
         "KV cache of {} slots {:.2f} GiB + other processes {:.2f} GiB exceed the budget of "
         "{:.2f} GiB (gpu_memory_utilization {} of {:.2f} GiB); raise "
         "--gpu-memory-utilization, lower --max-model-len or --max-num-batched-tokens, or use "
         "a smaller model",
         gib(plan.weight_bytes), gib(plan.activation_bytes), need, gib(need * in.kv_slot_bytes),
         gib(plan.other_bytes), gib(plan.budget_bytes), in.gpu_memory_utilization,
         gib(in.total_bytes));
  }
  plan.num_kv_slots = in.requested_kv_slots > 0 ? in.requested_kv_slots : fit_slots;
  return plan;
}

}  // namespace optimate::cuda
