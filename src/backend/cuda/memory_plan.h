// How the GPU's memory is split between weights, per-step activations and the KV-cache pool,
// from a --gpu-memory-utilization fraction (vLLM's meaning: the share of the whole card this
// process may use, counting what other processes already hold against it). The pool is counted
// in slots (kv/kv_layout.h: a block takes one or a page of them) and holds whole pages.
#pragma once

#include <cstdint>
#include <string>

namespace optimate::cuda {

struct MemoryPlanInput {
  int64_t total_bytes = 0;       // the card's memory
  int64_t free_bytes = 0;        // free now (cudaMemGetInfo)
  bool weights_resident = false; // weights already allocated, so counted in used = total - free
  double gpu_memory_utilization = 0.9;
  int64_t weight_bytes = 0;
  int64_t activation_bytes = 0;
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
  int64_t other_bytes = 0;   // held by other processes or contexts before us
  int64_t weight_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t kv_slot_bytes = 0;
  int64_t kv_page_slots = 1;
  int64_t num_kv_slots = 0;  // a multiple of kv_page_slots
  std::string describe() const;
};

// Throws Error(kResourceExhausted) when the weights, activations and KV for one full-length
// sequence (or the slots asked for) do not fit, saying which part does not and what would make
// it fit; Error(kInvalidArgument) for a bad fraction or a requested slot count that is not whole
// pages.
MemoryPlan plan_memory(const MemoryPlanInput& in);

}  // namespace optimate::cuda
