// The scheduler's limits, resolved from EngineConfig and the model.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_precision.h"

namespace optimate::sched {

struct SchedulerConfig {
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 2048;
  int64_t block_size = 16;
  int64_t num_kv_blocks = 0;
  bool enable_prefix_caching = true;
  kv::KvPrecision kv_precision = kv::KvPrecision::kF32;
  std::vector<int64_t> eos_token_ids;

  // Throws Error(kInvalidArgument) naming the flag; also checks that one sequence of
  // max_model_len tokens fits in the KV pool, so a lone request can always run.
  void validate() const;
};

}  // namespace optimate::sched
