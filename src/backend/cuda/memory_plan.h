// How the GPU's memory is split between weights, per-step activations and the KV-cache pool,
// from a --gpu-memory-utilization fraction. vLLM's meaning: the share of the whole card this
// instance may use, counting only what the instance itself allocates (its weights, the
// activations and workspaces a profiled step needed, the KV cache), not the CUDA context nor
// other processes; these only have to leave the pool room in the memory that is free. The pool
// is counted in slots (kv/kv_layout.h: a block takes one or a page of them) and holds whole
// pages.
#pragma once

#include <cstdint>
#include <string>

namespace optimate::cuda {

// Kept free past the pool for what the runner allocates after it: decode graphs (their nodes;
// the kernels they replay allocate nothing) and kernels whose first launch comes after the
// profiled steps (lazy module loading).
inline constexpr int64_t kAfterPoolReserveBytes = int64_t{32} << 20;

struct MemoryPlanInput {
  int64_t total_bytes = 0;       // the card's memory
  // Free for the pool now: what cudaMemGetInfo reports free, less anything the runner has yet
  // to allocate besides the pool (before the weights are loaded, the weights and activations).
  int64_t free_bytes = 0;
  double gpu_memory_utilization = 0.9;
  int64_t weight_bytes = 0;
  // Everything else this instance holds besides weights and KV: activation buffers,
  // workspaces, and what the runtime allocated while a profiled step ran (measured), or an
  // estimate of them before anything is allocated.
  int64_t activation_bytes = 0;
  int64_t reserve_bytes = kAfterPoolReserveBytes;
  int64_t kv_slot_bytes = 0;     // one slot of K and V across all layers
  int64_t kv_page_slots = 1;     // the pool holds whole pages of this many slots
  int64_t min_kv_slots = 1;      // slots one full-length sequence needs
  int64_t requested_kv_slots = 0;  // 0: as many as fit; else a multiple of kv_page_slots
  // For the message when something does not fit: the context length min_kv_slots holds, the
  // tokens of a block and the slots it takes (0: the message names slots only), and whether
  // FP8 weights would be a way out (the GPU runs them and the weights are not FP8 yet).
  int64_t max_model_len = 0;
  int64_t block_size = 0;
  int64_t slots_per_block = 1;
  bool fp8_weights_possible = false;
  bool kv_bf16 = true;  // the cache stores bf16 blocks, so int8 would halve it
};

struct MemoryPlan {
  int64_t budget_bytes = 0;  // total * utilization
  int64_t weight_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t reserve_bytes = 0;
  int64_t kv_slot_bytes = 0;
  int64_t kv_page_slots = 1;
  int64_t num_kv_slots = 0;  // a multiple of kv_page_slots
  int64_t kv_bytes() const { return num_kv_slots * kv_slot_bytes; }
  std::string describe() const;
};

// Throws Error(kResourceExhausted) when the weights, activations and KV for one full-length
// sequence (or the slots asked for) do not fit the budget, or the pool does not fit the free
// memory (other processes hold it), saying which part does not fit and what would make it fit;
// Error(kInvalidArgument) for a bad fraction or a requested slot count that is not whole pages.
MemoryPlan plan_memory(const MemoryPlanInput& in);

}  // namespace optimate::cuda
