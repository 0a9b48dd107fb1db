// The start lines that state the KV cache's size, as vLLM prints them (a user comparing the
// two engines' logs reads the same words and figures).
#include "engine/kv_cache_report.h"

#include <gtest/gtest.h>

namespace optimate {
namespace {

// vLLM 0.26 printed, for the Llama-3-8B shape at 0.25 of an H200 with a bf16 cache:
//   GPU KV cache size: 154,752 tokens
//   Maximum concurrency for 8,192 tokens per request: 18.89x
TEST(KvCacheReport, StatesSizeAndConcurrencyAsVllmDoes) {
  KvCacheShape shape;
  shape.num_layers = 32;
  shape.num_blocks = 9672;
  shape.block_size = 16;
  shape.num_kv_heads = 8;
  shape.head_dim = 128;
  shape.layout = kv::plan_kv_layout(kv::KvPrecision::kBF16, kv::KvPrecision::kBF16, std::nullopt, 8, 16, 128);
  const KvCacheReport r = kv_cache_report(shape, 8192);
  EXPECT_EQ(r.size_tokens, 154752);
  EXPECT_EQ(r.memory_bytes, int64_t{154752} * 32 * 2 * 8 * 128 * 2);
  const std::vector<std::string> lines = kv_cache_report_lines(r, "cuda");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "Available KV cache memory: 18.89 GiB");
  EXPECT_EQ(lines[1].rfind("GPU KV cache size: 154,752 tokens", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2], "Maximum concurrency for 8,192 tokens per request: 18.89x");
}

// A cache whose pages hold two fp8 blocks or one bf16 block counts its bf16 blocks.
TEST(KvCacheReport, DynamicCacheCountsBlocksOfItsOwnPrecision) {
  KvCacheShape shape;
  shape.num_layers = 2;
  shape.num_blocks = 200;  // slots: 100 pages of 2
  shape.block_size = 16;
  shape.num_kv_heads = 2;
  shape.head_dim = 64;
  shape.layout = kv::plan_kv_layout(kv::KvPrecision::kBF16, kv::KvPrecision::kBF16, kv::KvPrecision::kFP8, 2, 16, 64);
  const KvCacheReport r = kv_cache_report(shape, 100);
  EXPECT_EQ(r.num_blocks, 200 / shape.layout.slots_for(kv::KvPrecision::kBF16));
  EXPECT_EQ(r.size_tokens, r.num_blocks * 16);
  EXPECT_DOUBLE_EQ(r.max_concurrency, static_cast<double>(r.num_blocks) / 7.0);  // 100 tokens: 7 blocks
  EXPECT_EQ(kv_cache_report_lines(r, "cpu")[1].rfind("CPU KV cache size:", 0), 0u);
}

}  // namespace
}  // namespace optimate
