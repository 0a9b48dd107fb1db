#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "kv/block_pool.h"
#include "kv/kv_cache_manager.h"

namespace optimate::kv {
namespace {

TEST(BlockPool, AllocateReleaseAndRefCounts) {
  BlockPool pool(4, 16, true);
  auto a = pool.allocate(3, KvPrecision::kF32);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(pool.num_free_blocks(), 1);
  EXPECT_TRUE(pool.allocate(2, KvPrecision::kF32).empty());  // refused, nothing taken
  EXPECT_EQ(pool.num_free_blocks(), 1);
  pool.touch(std::span(a).first(1));
  EXPECT_EQ(pool.ref_count(a[0]), 2);
  pool.release(a);
  EXPECT_EQ(pool.num_free_blocks(), 3);
  pool.release(std::span(a).first(1));
  EXPECT_EQ(pool.num_free_blocks(), 4);
  EXPECT_THROW(pool.release(std::span(a).first(1)), Error);
  EXPECT_EQ(pool.allocate(1, KvPrecision::kBF16).size(), 1u);
}

TEST(BlockPool, PrecisionTagFollowsTheBlock) {
  BlockPool pool(2, 16, false);
  auto a = pool.allocate(1, KvPrecision::kBF16);
  auto b = pool.allocate(1, KvPrecision::kF32);
  EXPECT_EQ(pool.precision(a[0]), KvPrecision::kBF16);
  EXPECT_EQ(pool.precision(b[0]), KvPrecision::kF32);
}

// Freed first (the CPU's arenas, mapped on first write): one request after another writes at
// most twice the blocks one request holds, so the memory they take stays within twice one
// request's; then the least recently freed cached block is the one evicted.
TEST(BlockPool, FreedFirstReusesWrittenBlocksAndEvictsTheOldest) {
  const KvLayout layout{.full = KvPrecision::kF32, .base = KvPrecision::kF32};
  BlockPool pool(layout, 100, 16, true, FreeSpaceOrder::kFreedFirst);
  std::set<int32_t> written;
  for (int request = 0; request < 10; ++request) {
    const auto blocks = pool.allocate(3, KvPrecision::kF32);
    ASSERT_EQ(blocks.size(), 3u);
    written.insert(blocks.begin(), blocks.end());
    pool.cache_block(blocks[0], static_cast<BlockHash>(request));
    pool.release(blocks);
  }
  EXPECT_EQ(written.size(), 6u);
  EXPECT_EQ(pool.num_free_blocks(), 100);
  // The pool as vLLM orders it walks through untouched blocks first.
  BlockPool untouched_first(layout, 100, 16, true, FreeSpaceOrder::kUntouchedFirst);
  std::set<int32_t> spread;
  for (int request = 0; request < 10; ++request) {
    const auto blocks = untouched_first.allocate(3, KvPrecision::kF32);
    spread.insert(blocks.begin(), blocks.end());
    untouched_first.release(blocks);
  }
  EXPECT_EQ(spread.size(), 30u);
  // Cached blocks freed one after the other, twice the peak written: new content takes the
  // oldest one's space, and the rest stay cached.
  BlockPool lru(layout, 100, 16, true, FreeSpaceOrder::kFreedFirst);
  std::vector<int32_t> freed;
  for (int request = 0; request < 2; ++request) {
    const auto two = lru.allocate(2, KvPrecision::kF32);
    for (int32_t id : two) {
      lru.cache_block(id, 10 + static_cast<BlockHash>(freed.size()));
      freed.push_back(id);
    }
    lru.release(two);
  }
  ASSERT_EQ(freed.size(), 4u);
  EXPECT_EQ(lru.allocate(1, KvPrecision::kF32), std::vector<int32_t>{freed[0]});
  EXPECT_FALSE(lru.cached_block(10).has_value());
  EXPECT_EQ(lru.cached_block(11), freed[1]);
  EXPECT_EQ(lru.cached_block(12), freed[2]);
}

TEST(BlockHash, ChainedOverParent) {
  const std::vector<int32_t> x = {1, 2, 3, 4}, y = {5, 6, 7, 8};
  EXPECT_NE(hash_block(hash_block(kRootBlockHash, x), y), hash_block(hash_block(kRootBlockHash, y), y));
  std::vector<BlockHash> hashes;
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  extend_block_hashes(tokens, 4, hashes);
  ASSERT_EQ(hashes.size(), 2u);
  EXPECT_EQ(hashes[1], hash_block(hash_block(kRootBlockHash, x), y));
}

TEST(KvCacheManager, PrefixHitSharesBlocksAndLruEvictsOldestFree) {
  KvCacheManager kv(6, 2, true);
  const std::vector<int32_t> p = {1, 2, 3, 4, 5};
  EXPECT_EQ(kv.find_cached_prefix(0, p).num_tokens, 0);
  ASSERT_TRUE(kv.allocate(0, 0, 5, {}, KvPrecision::kF32));
  kv.commit(0, p, 5);
  // Sequence 1 with the same prompt: two full blocks hit (the last token is always computed).
  PrefixHit hit = kv.find_cached_prefix(1, p);
  EXPECT_EQ(hit.num_tokens, 4);
  ASSERT_TRUE(kv.allocate(1, hit.num_tokens, 1, hit, KvPrecision::kF32));
  EXPECT_EQ(kv.block_ids(1)[0], kv.block_ids(0)[0]);
  EXPECT_EQ(kv.pool().ref_count(kv.block_ids(0)[0]), 2);
  kv.free(0);
  kv.free(1);
  EXPECT_EQ(kv.pool().num_free_blocks(), 6);
  // Still cached while free; a hit takes the blocks back out of the free queue.
  EXPECT_EQ(kv.find_cached_prefix(2, p).num_tokens, 4);
  kv.free(2);
  // Filling the pool with new content evicts the cached blocks.
  ASSERT_TRUE(kv.allocate(3, 0, 12, {}, KvPrecision::kF32));
  EXPECT_EQ(kv.find_cached_prefix(4, p).num_tokens, 0);
  EXPECT_GE(kv.pool().counters().evictions, 2);
  kv.free(3);
  kv.free(4);
  EXPECT_EQ(kv.pool().num_free_blocks(), 6);
}

TEST(KvCacheManager, AllocationFailureChangesNothing) {
  KvCacheManager kv(3, 4, true);
  ASSERT_TRUE(kv.allocate(0, 0, 8, {}, KvPrecision::kF32));
  EXPECT_FALSE(kv.allocate(1, 0, 8, {}, KvPrecision::kF32));
  EXPECT_EQ(kv.pool().num_free_blocks(), 1);
  EXPECT_EQ(kv.blocks_needed(0, 12), 1);
}

TEST(KvSizing, BlocksForMemory) {
  // SmolLM2-135M: 30 layers, 3 KV heads, head dim 64, fp32, 16-token blocks = 737,280 B/block.
  EXPECT_EQ(num_blocks_for_memory(int64_t{1} << 30, 30, 3, 64, 16, KvPrecision::kF32), 1456);
  EXPECT_THROW(num_blocks_for_memory(1000, 30, 3, 64, 16, KvPrecision::kF32), Error);
  EXPECT_EQ(kv_precision_for(parse_choice<KvCacheDtype>("fp8", "kv-cache-dtype"), KvPrecision::kF32), KvPrecision::kFP8);
  EXPECT_THROW(parse_choice<KvCacheDtype>("fp6", "kv-cache-dtype"), Error);
  EXPECT_THROW(parse_choice<KvCacheDtype>("fp32", "kv-cache-dtype"), Error);  // not a name the settings table lists
  EXPECT_EQ(kv_precision_for(KvCacheDtype::kAuto, KvPrecision::kBF16), KvPrecision::kBF16);
}

}  // namespace
}  // namespace optimate::kv
