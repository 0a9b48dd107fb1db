// vllm:cache_config_info as vLLM exports it: an info gauge at 1 whose labels are the cache
// configuration in Python's str() spelling, read by routers for a replica's KV capacity.
#include "metrics/cache_config_info.h"

#include <gtest/gtest.h>

#include "metrics/registry.h"

namespace optimate::metrics {
namespace {

std::string label(const std::vector<std::pair<std::string, std::string>>& labels, const std::string& name) {
  for (const auto& [n, v] : labels)
    if (n == name) return v;
  return "<absent>";
}

// vLLM 0.26's figures for the Llama-3-8B shape at 0.25 of an H200 (9,672 blocks of 16 tokens,
// 18.89 sequences of 8,192 tokens).
CacheConfigInfo kv_bound_config() {
  CacheConfigInfo info;
  info.block_size = 16;
  info.gpu_memory_utilization = 0.25;
  info.swap_space_gib = 4.0;
  info.cache_dtype = "auto";
  info.enable_prefix_caching = false;
  info.num_gpu_blocks = 9672;
  info.kv_cache_size_tokens = 154752;
  info.kv_cache_max_concurrency = 9672.0 / 512.0;
  return info;
}

TEST(CacheConfigInfo, LabelsAreSpelledAsVllmWritesThem) {
  const auto labels = cache_config_labels(kv_bound_config());
  EXPECT_EQ(label(labels, "block_size"), "16");
  EXPECT_EQ(label(labels, "num_gpu_blocks"), "9672");
  EXPECT_EQ(label(labels, "cache_dtype"), "auto");
  EXPECT_EQ(label(labels, "gpu_memory_utilization"), "0.25");
  EXPECT_EQ(label(labels, "swap_space"), "4.0");  // Python's str(4.0)
  EXPECT_EQ(label(labels, "enable_prefix_caching"), "False");
  EXPECT_EQ(label(labels, "num_gpu_blocks_override"), "None");
  EXPECT_EQ(label(labels, "num_cpu_blocks"), "None");
  EXPECT_EQ(label(labels, "kv_cache_size_tokens"), "154752");
  EXPECT_EQ(label(labels, "kv_cache_max_concurrency"), "18.890625");
  EXPECT_EQ(label(labels, "engine"), "0");
}

TEST(CacheConfigInfo, SettingsGivenAppearAsNumbers) {
  CacheConfigInfo info = kv_bound_config();
  info.num_gpu_blocks_override = 4096;
  info.num_cpu_blocks = 2048;
  info.gpu_memory_utilization = 0.9;
  const auto labels = cache_config_labels(info);
  EXPECT_EQ(label(labels, "num_gpu_blocks_override"), "4096");
  EXPECT_EQ(label(labels, "num_cpu_blocks"), "2048");
  EXPECT_EQ(label(labels, "gpu_memory_utilization"), "0.9");
}

// A router reads capacity as num_gpu_blocks x block_size from the scraped line.
TEST(CacheConfigInfo, ExportedAsOneGaugeAtOne) {
  Registry registry;
  export_cache_config_info(registry, kv_bound_config());
  const std::string text = registry.render();
  EXPECT_NE(text.find("# TYPE vllm:cache_config_info gauge"), std::string::npos) << text;
  const size_t line = text.find("vllm:cache_config_info{");
  ASSERT_NE(line, std::string::npos) << text;
  const std::string sample = text.substr(line, text.find('\n', line) - line);
  EXPECT_NE(sample.find("block_size=\"16\""), std::string::npos) << sample;
  EXPECT_NE(sample.find("num_gpu_blocks=\"9672\""), std::string::npos) << sample;
  EXPECT_EQ(sample.substr(sample.size() - 4), " 1.0") << sample;  // as prometheus_client writes 1
}

}  // namespace
}  // namespace optimate::metrics
