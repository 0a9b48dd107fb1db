// vllm:cache_config_info, vLLM's info gauge (always 1) whose labels carry the KV cache's
// configuration and size, so a router or dashboard that reads a vLLM replica's capacity from it
// (num_gpu_blocks x block_size, kv_cache_size_tokens) reads Optimate's the same way. The values
// are written as vLLM writes them, Python's str() of each field ("True", "None", "4.0"), with
// vLLM's `engine` label.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "metrics/registry.h"

namespace optimate::metrics {

struct CacheConfigInfo {
  int64_t block_size = 16;
  double gpu_memory_utilization = 0.9;
  double swap_space_gib = 0.0;
  std::string cache_dtype = "auto";
  bool enable_prefix_caching = true;
  std::optional<int64_t> num_gpu_blocks_override;  // the setting, when given
  std::optional<int64_t> kv_cache_memory_bytes;    // the setting, when given
  int64_t num_gpu_blocks = 0;
  std::optional<int64_t> num_cpu_blocks;           // the host tier's blocks, when there is one
  int64_t kv_cache_size_tokens = 0;
  double kv_cache_max_concurrency = 0.0;           // sequences of max_model_len tokens at once
};

// The labels in vLLM's order with their values.
std::vector<std::pair<std::string, std::string>> cache_config_labels(const CacheConfigInfo& info);

// Registers the gauge with `info`'s labels, set to 1.
void export_cache_config_info(Registry& registry, const CacheConfigInfo& info);

}  // namespace optimate::metrics
