// The KV cache's size as vLLM states it: at start ("GPU KV cache size: N tokens", "Maximum
// concurrency for L tokens per request: Cx") and in the labels of vllm:cache_config_info.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runner/model_runner.h"

namespace optimate {

struct KvCacheReport {
  int64_t num_blocks = 0;        // blocks of the cache's own precision the device pool holds
  int64_t block_size = 0;
  int64_t size_tokens = 0;       // num_blocks * block_size
  int64_t memory_bytes = 0;      // the device arenas: K and V of every layer
  int64_t max_model_len = 0;
  double max_concurrency = 0.0;  // sequences of max_model_len tokens the pool holds at once
  int64_t num_host_blocks = 0;   // the host tier's blocks (swap and host prefix cache); 0: none
  std::string precision;         // of the device pool's blocks ("bf16", "fp8", ...)
};

// The context length an engine runs with: the setting if given (> 0), else the model's, never
// past what the runner allocated.
int64_t engine_context_length(int64_t max_model_len_setting, const ModelRunner& runner);

KvCacheReport kv_cache_report(const KvCacheShape& shape, int64_t max_model_len);

// vLLM's start lines for this report; `device` is "cuda" or "cpu".
std::vector<std::string> kv_cache_report_lines(const KvCacheReport& report, const std::string& device);

}  // namespace optimate
