#include "sched/scheduler_config.h"

#include "core/error.h"

namespace optimate::sched {

void SchedulerConfig::validate() const {
  if (max_num_seqs < 1)
    fail(ErrorCode::kInvalidArgument, "max-num-seqs must be at least 1, got {}", max_num_seqs);
  if (max_num_batched_tokens < 1)
    fail(ErrorCode::kInvalidArgument, "max-num-batched-tokens must be at least 1, got {}",
         max_num_batched_tokens);
  if (max_model_len < 2)
    fail(ErrorCode::kInvalidArgument, "max-model-len must be at least 2, got {}", max_model_len);
  if (block_size < 1 || block_size > 1024)
    fail(ErrorCode::kInvalidArgument, "block-size must be in [1, 1024], got {}", block_size);
  const int64_t blocks = num_kv_blocks / kv_layout.slots_for(kv_layout.base);
  if (blocks * block_size < max_model_len)
    fail(ErrorCode::kInvalidArgument,
         "the KV cache holds {} tokens ({} blocks of {}), fewer than max-model-len {}: raise "
         "kv-cache-memory or lower max-model-len",
         blocks * block_size, blocks, block_size, max_model_len);
  if (!(kv_watermark >= 0.0 && kv_watermark < 1.0))
    fail(ErrorCode::kInvalidArgument, "the KV admission watermark must be in [0, 1), got {}", kv_watermark);
  if (preemption_mode == PreemptionMode::kSwap && host_slots.swap == 0)
    fail(ErrorCode::kInvalidArgument, "preemption-mode swap needs host swap space: set swap-space above 0 "
         "(or use auto, which recomputes without it)");
}

}  // namespace optimate::sched
