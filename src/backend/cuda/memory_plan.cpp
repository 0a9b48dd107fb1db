#include "backend/cuda/memory_plan.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"

namespace optimate::cuda {
namespace {

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

std::string budget_text(const MemoryPlanInput& in, const MemoryPlan& plan) {
  return fmt::format("the {:.2f} GiB that gpu_memory_utilization {} of this GPU's {:.2f} GiB allows",
                     gib(plan.budget_bytes), in.gpu_memory_utilization, gib(in.total_bytes));
}

// Names the first part that does not fit the budget (weights, then activations, then the KV
// cache) and the settings that would make room.
[[noreturn]] void fail_to_fit(const MemoryPlanInput& in, const MemoryPlan& plan, int64_t fit_slots,
                              int64_t min_slots) {
  const int64_t room = plan.budget_bytes;
  // A larger share helps only where the free memory would hold the pool it gives.
  const bool free_memory_fits =
      in.free_bytes - in.reserve_bytes >= std::max(min_slots, in.requested_kv_slots) * in.kv_slot_bytes;
  const std::string more =
      in.gpu_memory_utilization < 1.0 && free_memory_fits ? "raise --gpu-memory-utilization, " : "";
  const std::string fp8 = in.fp8_weights_possible ? "store them in FP8 (--quantization fp8, 0.57x the bytes), " : "";
  if (plan.weight_bytes > room)
    fail(ErrorCode::kResourceExhausted,
         "the model does not fit in GPU memory: its weights take {:.2f} GiB, more than {}; {}{}split it over GPUs "
         "(--tensor-parallel-size), or serve a smaller model",
         gib(plan.weight_bytes), budget_text(in, plan), more, fp8);
  if (plan.weight_bytes + plan.activation_bytes > room)
    fail(ErrorCode::kResourceExhausted,
         "the model does not fit in GPU memory: its weights ({:.2f} GiB) and the activations of a step "
         "({:.2f} GiB) take more than {}; lower --max-num-batched-tokens or --max-num-seqs (the step the "
         "activations are sized for), {}{}or split it over GPUs (--tensor-parallel-size)",
         gib(plan.weight_bytes), gib(plan.activation_bytes), budget_text(in, plan), more, fp8);
  const int64_t left = room - plan.weight_bytes - plan.activation_bytes;
  if (in.requested_kv_slots > min_slots)
    fail(ErrorCode::kResourceExhausted,
         "a KV cache of {} slots (--num-kv-blocks) takes {:.2f} GiB, and {:.2f} GiB remain of {} after the weights "
         "({:.2f} GiB) and activations ({:.2f} GiB): {} slots fit",
         in.requested_kv_slots, gib(in.requested_kv_slots * in.kv_slot_bytes), gib(left), budget_text(in, plan),
         gib(plan.weight_bytes), gib(plan.activation_bytes), fit_slots);
  const std::string context =
      in.max_model_len > 0 ? fmt::format("one sequence of {} tokens (--max-model-len)", in.max_model_len)
                           : std::string("one full-length sequence");
  const int64_t fit_tokens =
      in.block_size > 0 ? fit_slots / std::max<int64_t>(1, in.slots_per_block) * in.block_size : 0;
  fail(ErrorCode::kResourceExhausted,
       "the KV cache does not fit in GPU memory: {:.2f} GiB remain of {} after the weights ({:.2f} GiB) and "
       "activations ({:.2f} GiB), and {} needs {:.2f} GiB of KV; {}{}{}or lower --max-num-batched-tokens",
       gib(std::max<int64_t>(0, left)), budget_text(in, plan), gib(plan.weight_bytes), gib(plan.activation_bytes),
       context, gib(min_slots * in.kv_slot_bytes),
       fit_tokens > 0 ? fmt::format("lower --max-model-len to {} or less, ", fit_tokens) : std::string(),
       in.kv_bf16 ? "store the KV cache in int8 (--kv-cache-dtype int8, half the bytes of bf16), " : "", more);
}

// The pool fits the budget but not the memory other processes and the CUDA context leave free:
// names what they hold and the share, or the slot count, at which the pool would fit.
[[noreturn]] void fail_free_memory(const MemoryPlanInput& in, const MemoryPlan& plan, int64_t min_slots) {
  const int64_t pool_room = std::max<int64_t>(0, in.free_bytes - in.reserve_bytes);
  const int64_t others = std::max<int64_t>(0, in.total_bytes - in.free_bytes - plan.weight_bytes - plan.activation_bytes);
  const std::string held = fmt::format(
      "the KV cache of {} slots ({:.2f} GiB, within gpu_memory_utilization {}) does not fit in the {:.2f} GiB of "
      "GPU memory left free: other processes and this one's CUDA context hold {:.2f} GiB of this GPU's {:.2f} GiB",
      plan.num_kv_slots, gib(plan.kv_bytes()), in.gpu_memory_utilization, gib(pool_room), gib(others),
      gib(in.total_bytes));
  const int64_t page_bytes = in.kv_slot_bytes * in.kv_page_slots;
  const int64_t room_slots = pool_room / page_bytes * in.kv_page_slots;
  if (in.requested_kv_slots > 0 && room_slots >= min_slots)
    fail(ErrorCode::kResourceExhausted, "{}; free the GPU, or lower --num-kv-blocks to {} or less", held, room_slots);
  // The largest share, in hundredths, whose pool fits what is free, if its budget still holds
  // one full-length sequence.
  const double share = std::floor(static_cast<double>(plan.weight_bytes + plan.activation_bytes + pool_room) /
                                  static_cast<double>(in.total_bytes) * 100.0) / 100.0;
  const int64_t share_pool = static_cast<int64_t>(share * static_cast<double>(in.total_bytes)) - plan.weight_bytes -
                             plan.activation_bytes;
  if (room_slots < min_slots || share_pool < min_slots * in.kv_slot_bytes)
    fail(ErrorCode::kResourceExhausted, "{}, and one full-length sequence needs {:.2f} GiB of KV; free the GPU, or "
         "lower --max-model-len", held, gib(min_slots * in.kv_slot_bytes));
  fail(ErrorCode::kResourceExhausted, "{}; free the GPU, or lower --gpu-memory-utilization to {:.2f} or less", held,
       share);
}

}  // namespace

std::string MemoryPlan::describe() const {
  return fmt::format(
      "budget {:.2f} GiB: weights {:.2f} GiB, activations and workspaces {:.2f} GiB, KV cache {} slots x "
      "{:.3f} MiB{} = {:.2f} GiB, {:.0f} MiB kept free past it",
      gib(budget_bytes), gib(weight_bytes), gib(activation_bytes), num_kv_slots,
      static_cast<double>(kv_slot_bytes) / (1024.0 * 1024.0),
      kv_page_slots > 1 ? fmt::format(" (pages of {})", kv_page_slots) : std::string(), gib(kv_bytes()),
      static_cast<double>(reserve_bytes) / (1024.0 * 1024.0));
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
  plan.weight_bytes = in.weight_bytes;
  plan.activation_bytes = in.activation_bytes;
  plan.reserve_bytes = in.reserve_bytes;
  plan.kv_slot_bytes = in.kv_slot_bytes;
  plan.kv_page_slots = in.kv_page_slots;
  const int64_t left = plan.budget_bytes - plan.weight_bytes - plan.activation_bytes;
  const int64_t page_bytes = in.kv_slot_bytes * in.kv_page_slots;
  const int64_t fit_slots = left > 0 ? left / page_bytes * in.kv_page_slots : 0;
  const int64_t min_slots = (in.min_kv_slots + in.kv_page_slots - 1) / in.kv_page_slots * in.kv_page_slots;
  if (fit_slots < std::max<int64_t>(min_slots, in.requested_kv_slots)) fail_to_fit(in, plan, fit_slots, min_slots);
  plan.num_kv_slots = in.requested_kv_slots > 0 ? in.requested_kv_slots : fit_slots;
  if (plan.kv_bytes() + plan.reserve_bytes > in.free_bytes) fail_free_memory(in, plan, min_slots);
  return plan;
}

}  // namespace optimate::cuda
