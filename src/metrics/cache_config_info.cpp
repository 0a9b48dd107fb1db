#include "metrics/cache_config_info.h"

#include <fmt/format.h>

namespace optimate::metrics {
namespace {

// Python's str(float): the shortest text that reads back the same, with ".0" on whole numbers.
std::string python_float(double x) {
  std::string s = fmt::format("{}", x);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // n: inf, nan
  return s;
}

std::string python_bool(bool b) { return b ? "True" : "False"; }

std::string python_optional(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : "None"; }

}  // namespace

std::vector<std::pair<std::string, std::string>> cache_config_labels(const CacheConfigInfo& info) {
  return {
      {"block_size", std::to_string(info.block_size)},
      {"gpu_memory_utilization", python_float(info.gpu_memory_utilization)},
      {"swap_space", python_float(info.swap_space_gib)},
      {"cache_dtype", info.cache_dtype},
      {"is_attention_free", python_bool(false)},
      {"num_gpu_blocks_override", python_optional(info.num_gpu_blocks_override)},
      {"sliding_window", "None"},
      {"enable_prefix_caching", python_bool(info.enable_prefix_caching)},
      {"num_gpu_blocks", std::to_string(info.num_gpu_blocks)},
      {"num_cpu_blocks", python_optional(info.num_cpu_blocks)},
      {"kv_cache_size_tokens", std::to_string(info.kv_cache_size_tokens)},
      {"kv_cache_max_concurrency", python_float(info.kv_cache_max_concurrency)},
      {"kv_cache_memory_bytes", python_optional(info.kv_cache_memory_bytes)},
      {"engine", "0"},
  };
}

void export_cache_config_info(Registry& registry, const CacheConfigInfo& info) {
  std::vector<std::string> names, values;
  for (auto& [name, value] : cache_config_labels(info)) {
    names.push_back(name);
    values.push_back(value);
  }
  registry.gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", names).labels(values).set(1.0);
}

}  // namespace optimate::metrics
