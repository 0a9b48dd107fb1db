// How much memory the CPU backend takes, decided before the runner is built: the KV cache sized
// from what the engine can hold at once (max_num_seqs sequences of max_model_len tokens), capped
// at a stated share of the memory the OS reports available, instead of a fixed size; and the
// weight and activation bytes, for the startup log.
//
// The runner leaves the cache uninitialized (the OS maps its pages on first write), so a
// process's resident memory grows with the blocks the engine has actually written, never past
// the plan.
#pragma once

#include <cstdint>
#include <string>

#include "backend/cpu/micro_batches.h"
#include "model/model_config.h"

namespace optimate::cpu {

// The share of MemAvailable the KV cache may take when the engine's limits would need more.
inline constexpr double kKvShareOfAvailable = 0.25;

struct CpuMemoryLimits {
  int64_t max_model_len = 0;          // tokens per sequence
  int64_t max_num_seqs = 0;           // sequences at once
  int64_t max_num_batched_tokens = 0; // tokens per step
  int64_t block_size = 16;
  int64_t available_bytes = 0;        // what the OS reports (available_memory_bytes())
  int64_t fixed_kv_blocks = 0;        // the user's size (--num-kv-blocks, --kv-cache-memory); 0: plan it
  int64_t kv_bytes_per_block = 0;     // K and V of one block, every layer; 0: fp32 (cpu_kv_bytes_per_block)
  int64_t max_step_tokens = kCpuMicroBatchTokens;  // tokens the runner runs at once (CpuRunnerOptions); 0: all
};

struct CpuMemoryPlan {
  int64_t num_kv_blocks = 0;
  int64_t kv_bytes = 0;
  int64_t kv_bytes_needed = 0;  // for max_num_seqs x max_model_len tokens
  bool kv_capped = false;       // needed more than kKvShareOfAvailable of available memory
  bool fixed = false;           // the user's size
  int64_t activation_bytes = 0;  // the runner's scratch for one part of a step, and the step's logits
  int64_t scratch_tokens = 0;    // tokens of that part: max_num_batched_tokens, at most max_step_tokens
  int64_t logit_rows = 0;        // max_num_seqs: a step's logit rows
  int64_t logits_bytes = 0;      // those rows' logits (within activation_bytes)

  // "KV cache 112.5 MB reserved (...), activations up to 30.1 MB (...)", for the startup log.
  std::string describe() const;
};

// K and V of one block of block_size tokens, every layer, fp32.
int64_t cpu_kv_bytes_per_block(const ModelConfig& config, int64_t block_size);

// Activation scratch of a forward pass of `num_tokens` tokens with `num_logit_rows` logit rows
// over contexts up to `max_context`, on `num_threads` threads.
int64_t cpu_activation_bytes(const ModelConfig& config, int64_t num_tokens, int64_t num_logit_rows,
                             int64_t max_context, int num_threads);

// Error(kInvalidArgument) naming the limit when a limit is not positive or, for a planned cache,
// not even one sequence of max_model_len tokens fits under the cap.
CpuMemoryPlan plan_cpu_memory(const ModelConfig& config, const CpuMemoryLimits& limits, int num_threads);

// MemAvailable of /proc/meminfo (0 when it cannot be read).
int64_t available_memory_bytes();

}  // namespace optimate::cpu
