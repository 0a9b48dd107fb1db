// The prefix cache through the KV cache manager: which cached blocks survive when the pool
// needs room (the least recently freed first, and of one sequence its tail blocks first, since
// a later request more likely shares a beginning), and hits on blocks that are free but still
// cached, which count as free room only once.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "kv/kv_cache_manager.h"

namespace optimate::kv {
namespace {

constexpr int64_t kBlockSize = 2;

std::vector<int32_t> tokens_from(int32_t first, int64_t count) {
  std::vector<int32_t> out(static_cast<size_t>(count));
  std::iota(out.begin(), out.end(), first);
  return out;
}

// Computes `seq` from scratch and registers its full blocks, as a finished prefill does.
void prefill(KvCacheManager& kv, SeqId seq, const std::vector<int32_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  ASSERT_TRUE(kv.allocate(seq, 0, n, {}, KvPrecision::kF32));
  kv.commit(seq, tokens, n);
}

// Tokens of `prompt` a new sequence would find cached (the lookup leaves nothing behind).
int64_t cached_tokens(KvCacheManager& kv, const std::vector<int32_t>& prompt) {
  constexpr SeqId kProbe = 1000;
  const int64_t n = kv.find_cached_prefix(kProbe, prompt).num_tokens;
  kv.free(kProbe);
  return n;
}

struct EvictionCase {
  const char* name;
  bool refresh_a;              // a hit on A's blocks after both were freed
  int64_t num_taken;           // fresh blocks a new sequence then takes
  std::vector<int32_t> taken;  // which ones
  int64_t a_cached_tokens, b_cached_tokens;
  int64_t evictions;
};

// 8 blocks of 2 tokens. A (blocks 0-3) and B (blocks 4-7) each computed 7 tokens: 3 full
// cached blocks and a partial one. A is freed before B.
const EvictionCase kEvictionCases[] = {
    {"nothing taken: both prefixes cached", false, 0, {}, 6, 6, 0},
    {"A's partial tail block goes first; it held nothing cached", false, 1, {3}, 6, 6, 0},
    {"then A's last full block: A keeps 2 blocks", false, 2, {3, 2}, 4, 6, 1},
    {"A's blocks go tail first", false, 3, {3, 2, 1}, 2, 6, 2},
    {"all of A before any of B", false, 4, {3, 2, 1, 0}, 0, 6, 3},
    {"then B's partial tail block", false, 5, {3, 2, 1, 0, 7}, 0, 6, 3},
    {"then B's full blocks, tail first", false, 6, {3, 2, 1, 0, 7, 6}, 0, 4, 4},
    {"every block taken", false, 8, {3, 2, 1, 0, 7, 6, 5, 4}, 0, 0, 6},
    {"A used again after B was freed: B is now the older", true, 2, {7, 6}, 6, 4, 1},
    {"A used again: all of B goes before A", true, 5, {7, 6, 5, 4, 3}, 6, 0, 3},
    {"A used again: then A's tail", true, 6, {7, 6, 5, 4, 3, 2}, 4, 0, 4},
};

TEST(PrefixCache, EvictsLeastRecentlyFreedTailBlocksFirst) {
  const std::vector<int32_t> a = tokens_from(1, 7), b = tokens_from(11, 7);
  for (const EvictionCase& c : kEvictionCases) {
    SCOPED_TRACE(c.name);
    KvCacheManager kv(8, kBlockSize, true);
    prefill(kv, 0, a);
    prefill(kv, 1, b);
    ASSERT_EQ(std::vector<int32_t>(kv.block_ids(0).begin(), kv.block_ids(0).end()),
              (std::vector<int32_t>{0, 1, 2, 3}));
    kv.free(0);
    kv.free(1);
    EXPECT_EQ(kv.pool().num_free_blocks(), 8);
    if (c.refresh_a) {
      const PrefixHit hit = kv.find_cached_prefix(2, a);
      ASSERT_EQ(hit.num_tokens, 6);
      ASSERT_TRUE(kv.allocate(2, hit.num_tokens, 1, hit, KvPrecision::kF32));
      kv.free(2);
    }
    if (c.num_taken > 0)
      ASSERT_TRUE(kv.allocate(3, 0, c.num_taken * kBlockSize, {}, KvPrecision::kF32));
    EXPECT_EQ(std::vector<int32_t>(kv.block_ids(3).begin(), kv.block_ids(3).end()), c.taken);
    EXPECT_EQ(cached_tokens(kv, a), c.a_cached_tokens);
    EXPECT_EQ(cached_tokens(kv, b), c.b_cached_tokens);
    EXPECT_EQ(kv.pool().counters().evictions, c.evictions);
    kv.free(3);
    EXPECT_EQ(kv.pool().num_free_blocks(), 8);
  }
}

struct DuplicateCase {
  const char* name;
  bool free_y;             // Y is freed too, after X
  int64_t num_taken;       // fresh blocks a new sequence then takes
  std::vector<int32_t> hit;  // blocks a lookup of the prompt finds
};

// X (blocks 0-3) and Y (blocks 4-7) computed the same 7 tokens side by side, neither finding
// the other in the cache; X's copies were registered first. X is freed.
const DuplicateCase kDuplicateCases[] = {
    {"both copies cached: the hit takes Y's, in use, costing no free block", false, 0, {4, 5, 6}},
    {"X's free copies evicted: Y's still found", false, 4, {4, 5, 6}},
    {"both freed, X's evicted: Y's still found", true, 4, {4, 5, 6}},
    {"both freed and evicted", true, 8, {}},
};

TEST(PrefixCache, ContentStaysFindableWhileAnyCopyOfItIsCached) {
  const std::vector<int32_t> p = tokens_from(1, 7);
  for (const DuplicateCase& c : kDuplicateCases) {
    SCOPED_TRACE(c.name);
    KvCacheManager kv(8, kBlockSize, true);
    prefill(kv, 0, p);
    prefill(kv, 1, p);
    kv.free(0);
    if (c.free_y) kv.free(1);
    if (c.num_taken > 0)
      ASSERT_TRUE(kv.allocate(2, 0, c.num_taken * kBlockSize, {}, KvPrecision::kF32));
    EXPECT_EQ(kv.find_cached_prefix(3, p).block_ids, c.hit);
    for (SeqId s : {1, 2, 3}) kv.free(s);
    EXPECT_EQ(kv.pool().num_free_blocks(), 8);
  }
}

struct FreedHitCase {
  const char* name;
  int64_t num_blocks;
  int64_t other_blocks;  // held by an unrelated sequence
  bool x_shared;         // a fork of X keeps X's full blocks in use
  int64_t y_extra;       // tokens Y has beyond X's 7
  bool admitted;
  int64_t free_after;    // free blocks after Y's allocation (or its refusal)
};

// X computed 7 tokens (3 full cached blocks and a partial one) and is freed; Y, with X's
// tokens at its start, is allocated right after: its 3 hit blocks are free but cached.
const FreedHitCase kFreedHitCases[] = {
    {"the hit blocks leave the free queue before a fresh block is taken", 4, 0, false, 0, true,
     0},
    {"free hit blocks count against the free room: one short", 5, 1, false, 2, false, 4},
    {"free hit blocks count against the free room: just enough", 5, 0, false, 2, true, 0},
    {"hit blocks still in use cost no free room", 5, 0, true, 0, true, 0},
};

TEST(PrefixCache, HitOnBlocksFreedInTheSameStep) {
  const std::vector<int32_t> x = tokens_from(1, 7);
  constexpr SeqId kX = 0, kFork = 1, kOther = 2, kY = 3;
  for (const FreedHitCase& c : kFreedHitCases) {
    SCOPED_TRACE(c.name);
    KvCacheManager kv(c.num_blocks, kBlockSize, true);
    if (c.other_blocks > 0)
      ASSERT_TRUE(kv.allocate(kOther, 0, c.other_blocks * kBlockSize, {}, KvPrecision::kF32));
    prefill(kv, kX, x);
    const std::vector<int32_t> x_blocks(kv.block_ids(kX).begin(), kv.block_ids(kX).end());
    if (c.x_shared) {
      EXPECT_EQ(kv.fork(kX, kFork, 6), 6);
      ASSERT_TRUE(kv.allocate(kFork, 6, 1, {}, KvPrecision::kF32));
      EXPECT_EQ(kv.pool().num_free_blocks(), 0);
    }
    kv.free(kX);
    const int64_t free_before = kv.pool().num_free_blocks();

    std::vector<int32_t> y = x;
    for (int64_t i = 0; i < c.y_extra; ++i) y.push_back(50 + static_cast<int32_t>(i));
    const PrefixHit hit = kv.find_cached_prefix(kY, y);
    ASSERT_EQ(hit.num_tokens, 6);
    EXPECT_EQ(hit.block_ids, std::vector<int32_t>(x_blocks.begin(), x_blocks.begin() + 3));
    const int64_t num_new = static_cast<int64_t>(y.size()) - hit.num_tokens;
    EXPECT_EQ(kv.allocate(kY, hit.num_tokens, num_new, hit, KvPrecision::kF32), c.admitted);
    EXPECT_EQ(kv.pool().num_free_blocks(), c.free_after);
    EXPECT_EQ(kv.pool().counters().evictions, 0);
    if (c.admitted) {
      const auto y_blocks = kv.block_ids(kY);
      for (size_t b = 0; b < 3; ++b)
        EXPECT_EQ(kv.pool().ref_count(y_blocks[b]), c.x_shared ? 2 : 1);
      // Whatever Y computes goes to blocks of its own, never to a cached one it hit.
      for (size_t b = 3; b < y_blocks.size(); ++b) {
        EXPECT_EQ(kv.pool().ref_count(y_blocks[b]), 1);
        EXPECT_EQ(std::count(hit.block_ids.begin(), hit.block_ids.end(), y_blocks[b]), 0);
      }
    } else {
      kv.free(kY);  // as the scheduler does after a refused allocation
      EXPECT_EQ(kv.pool().num_free_blocks(), free_before);
      EXPECT_EQ(cached_tokens(kv, y), 6);  // nothing was lost
    }
    for (SeqId s : {kY, kFork, kOther}) kv.free(s);
    EXPECT_EQ(kv.pool().num_free_blocks(), c.num_blocks);
  }
}

}  // namespace
}  // namespace optimate::kv
