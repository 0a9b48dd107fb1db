// Seeded random interleavings against a plain reference model. BlockPool: allocate, touch,
// release, cache and reset in any order keep the counts conserved (free + referenced = all),
// no block is both free and referenced, allocation takes an untouched block or the least
// recently freed one in the order the pool was given (untouched first; or freed first once
// twice the peak of live blocks have been used), the
// cache maps exactly the hashes the model expects, and every block comes back at the end.
// KvCacheManager: sequences that hit, fork, grow and free never write into a block another
// sequence reads, a hit always returns blocks holding exactly the tokens looked up, and the
// reference counts equal the block tables' references.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <random>

#include "kv/kv_cache_manager.h"

namespace optimate::kv {
namespace {

struct PoolModel {
  std::vector<int32_t> refs;
  std::deque<int32_t> untouched;   // never allocated
  std::deque<int32_t> free_queue;  // freed, front: the least recently
  bool freed_first = false;
  int64_t num_live = 0;
  int64_t peak_live = 0;
  std::vector<std::optional<BlockHash>> hash_of;
  std::map<BlockHash, std::vector<int32_t>> cached;  // every block holding a hash, in order
  int64_t evictions = 0;

  PoolModel(int64_t n, bool freed_first) : refs(n, 0), hash_of(n), freed_first(freed_first) {
    for (int32_t id = 0; id < n; ++id) untouched.push_back(id);
  }
  int64_t num_free() const { return static_cast<int64_t>(untouched.size() + free_queue.size()); }
  std::vector<int32_t> allocate(int64_t count) {
    std::vector<int32_t> ids;
    if (count > num_free()) return ids;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t used = static_cast<int64_t>(refs.size() - untouched.size());
      const bool untouched_first = !freed_first || used < 2 * peak_live;
      std::deque<int32_t>& from = untouched.empty() || (!untouched_first && !free_queue.empty()) ? free_queue : untouched;
      const int32_t id = from.front();
      from.pop_front();
      if (hash_of[id]) {
        auto& copies = cached[*hash_of[id]];
        copies.erase(std::find(copies.begin(), copies.end(), id));
        if (copies.empty()) cached.erase(*hash_of[id]);
        hash_of[id].reset();
        ++evictions;
      }
      refs[id] = 1;
      peak_live = std::max(peak_live, ++num_live);
      ids.push_back(id);
    }
    return ids;
  }
  void touch(int32_t id) {
    if (refs[id]++ == 0) {
      free_queue.erase(std::find(free_queue.begin(), free_queue.end(), id));
      peak_live = std::max(peak_live, ++num_live);
    }
  }
  void release(int32_t id) {
    if (--refs[id] == 0) {
      free_queue.push_back(id);
      --num_live;
    }
  }
  void cache(int32_t id, BlockHash h) {
    if (!hash_of[id]) {
      hash_of[id] = h;
      cached[h].push_back(id);
    }
  }
  // A copy in use if there is one (a hit on it costs no free block), else the oldest.
  std::optional<int32_t> lookup(BlockHash h) const {
    auto it = cached.find(h);
    if (it == cached.end()) return std::nullopt;
    for (int32_t id : it->second)
      if (refs[id] > 0) return id;
    return it->second.front();
  }
  void reset() {
    for (auto& h : hash_of) h.reset();
    cached.clear();
  }
};

constexpr BlockHash kNumHashes = 12;  // few, so hashes collide and hits are common

void expect_same(const BlockPool& pool, const PoolModel& m, bool caching) {
  const int64_t n = pool.num_blocks();
  int64_t referenced = 0;
  for (int32_t id = 0; id < n; ++id) {
    ASSERT_EQ(pool.ref_count(id), m.refs[id]) << "block " << id;
    ASSERT_EQ(pool.is_free(id), m.refs[id] == 0) << "block " << id;
    referenced += m.refs[id] > 0 ? 1 : 0;
  }
  ASSERT_EQ(pool.num_free_blocks(), m.num_free());
  ASSERT_EQ(pool.num_free_blocks() + referenced, n);
  ASSERT_DOUBLE_EQ(pool.usage(), static_cast<double>(referenced) / static_cast<double>(n));
  for (BlockHash h = 0; h < kNumHashes; ++h) {
    ASSERT_EQ(pool.cached_block(h), caching ? m.lookup(h) : std::nullopt) << "hash " << h;
  }
  ASSERT_EQ(pool.counters().evictions, m.evictions);
}

struct PoolCase {
  uint64_t seed;
  int64_t num_blocks;
  bool prefix_caching;
  FreeSpaceOrder order = FreeSpaceOrder::kUntouchedFirst;
};

TEST(BlockPoolProperty, RandomInterleavingsMatchTheModel) {
  constexpr FreeSpaceOrder kFreedFirst = FreeSpaceOrder::kFreedFirst;
  const PoolCase cases[] = {{1, 8, true},  {2, 16, true},  {3, 64, true},  {4, 16, false},
                            {5, 1, true},  {6, 3, true},   {7, 16, true, kFreedFirst},
                            {8, 64, true, kFreedFirst}, {9, 16, false, kFreedFirst}};
  for (const PoolCase& c : cases) {
    SCOPED_TRACE("seed " + std::to_string(c.seed) + ", " + std::to_string(c.num_blocks) +
                 " blocks");
    std::mt19937_64 rng(c.seed);
    auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
    BlockPool pool({.full = KvPrecision::kF32, .base = KvPrecision::kF32}, c.num_blocks, 4, c.prefix_caching,
                   c.order);
    PoolModel m(c.num_blocks, c.order == FreeSpaceOrder::kFreedFirst);
    std::vector<std::vector<int32_t>> holders;  // each holds one reference to its blocks
    for (int op = 0; op < 4000; ++op) {
      const int64_t kind = pick(100);
      if (kind < 35) {
        const int64_t count = 1 + pick(4);
        const auto ids = pool.allocate(count, KvPrecision::kF32);
        ASSERT_EQ(ids, m.allocate(count)) << "op " << op;
        if (!ids.empty()) holders.push_back(ids);
      } else if (kind < 50) {
        // A prefix-cache hit: touch whatever block holds a hash, free or not.
        const BlockHash h = static_cast<BlockHash>(pick(kNumHashes));
        if (auto id = pool.cached_block(h)) {
          pool.touch(std::span(&*id, 1));
          m.touch(*id);
          holders.push_back({*id});
        }
      } else if (kind < 60 && !holders.empty()) {
        // Sharing a block someone holds (a fork).
        const int32_t id = holders[pick(static_cast<int64_t>(holders.size()))].front();
        pool.touch(std::span(&id, 1));
        m.touch(id);
        holders.push_back({id});
      } else if (kind < 85 && !holders.empty()) {
        const size_t i = static_cast<size_t>(pick(static_cast<int64_t>(holders.size())));
        std::vector<int32_t> tail_first(holders[i].rbegin(), holders[i].rend());
        pool.release(tail_first);
        for (int32_t id : tail_first) m.release(id);
        holders.erase(holders.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (kind < 99 && !holders.empty()) {
        const auto& held = holders[pick(static_cast<int64_t>(holders.size()))];
        const int32_t id = held[pick(static_cast<int64_t>(held.size()))];
        const BlockHash h = static_cast<BlockHash>(pick(kNumHashes));
        pool.cache_block(id, h);
        if (c.prefix_caching) m.cache(id, h);
      } else if (kind == 99) {
        pool.reset_prefix_cache();
        m.reset();
      }
      expect_same(pool, m, c.prefix_caching);
      if (::testing::Test::HasFatalFailure()) return;
    }
    for (const auto& held : holders) pool.release(std::vector<int32_t>(held.rbegin(), held.rend()));
    EXPECT_EQ(pool.num_free_blocks(), c.num_blocks);
    for (int32_t id = 0; id < c.num_blocks; ++id) EXPECT_EQ(pool.ref_count(id), 0);
  }
}

// A sequence as its user sees it: its tokens and how many of them have KV.
struct SeqModel {
  std::vector<int32_t> tokens;
  int64_t computed = 0;
};

struct ManagerCase {
  uint64_t seed;
  int64_t num_blocks;
  int64_t block_size;
};

TEST(KvCacheManagerProperty, SharedBlocksAreNeverWrittenAndHitsHoldTheirTokens) {
  const ManagerCase cases[] = {{11, 16, 2}, {12, 32, 4}, {13, 12, 1}, {14, 64, 3}};
  for (const ManagerCase& c : cases) {
    SCOPED_TRACE("seed " + std::to_string(c.seed));
    std::mt19937_64 rng(c.seed);
    auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
    KvCacheManager kv(c.num_blocks, c.block_size, true);
    const int64_t bs = c.block_size;
    // What each block holds, as written by the sequence computing it (-1: never written).
    std::vector<std::vector<int32_t>> content(c.num_blocks, std::vector<int32_t>(bs, -1));
    std::map<SeqId, SeqModel> seqs;
    SeqId next_seq = 0;

    // Computes positions [computed, computed + n) of `seq`, whose blocks were just allocated.
    auto compute = [&](SeqId seq, int64_t n) {
      SeqModel& s = seqs.at(seq);
      const auto blocks = kv.block_ids(seq);
      for (int64_t p = s.computed; p < s.computed + n; ++p) {
        const int32_t id = blocks[p / bs];
        ASSERT_EQ(kv.pool().ref_count(id), 1)
            << "sequence " << seq << " writes shared block " << id;
        content[id][p % bs] = s.tokens[p];
      }
      s.computed += n;
      kv.commit(seq, s.tokens, s.computed);
    };
    auto expect_consistent = [&] {
      std::vector<int32_t> refs(c.num_blocks, 0);
      for (const auto& [seq, s] : seqs) {
        const auto blocks = kv.block_ids(seq);
        ASSERT_EQ(static_cast<int64_t>(blocks.size()), (s.computed + bs - 1) / bs);
        for (int64_t p = 0; p < s.computed; ++p)
          ASSERT_EQ(content[blocks[p / bs]][p % bs], s.tokens[p]) << "sequence " << seq;
        for (int32_t id : blocks) ++refs[id];
      }
      int64_t free = 0;
      for (int32_t id = 0; id < c.num_blocks; ++id) {
        ASSERT_EQ(kv.pool().ref_count(id), refs[id]) << "block " << id;
        free += refs[id] == 0 ? 1 : 0;
      }
      ASSERT_EQ(kv.pool().num_free_blocks(), free);
    };

    // Prompts share beginnings: a few fixed stems, cut at random lengths, then a random tail.
    const std::vector<int32_t> stems[] = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
                                          {1, 2, 3, 4, 20, 21, 22, 23, 24, 25, 26, 27},
                                          {30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41}};
    for (int op = 0; op < 3000; ++op) {
      const int64_t kind = pick(100);
      const int64_t free_before = kv.pool().num_free_blocks();
      if (kind < 30) {  // a new sequence, after its longest cached prefix
        const auto& stem = stems[pick(3)];
        SeqModel s;
        s.tokens.assign(stem.begin(), stem.begin() + 1 + pick(static_cast<int64_t>(stem.size())));
        for (int64_t i = pick(3); i > 0; --i)
          s.tokens.push_back(50 + static_cast<int32_t>(pick(3)));
        const SeqId seq = next_seq++;
        const PrefixHit hit = kv.find_cached_prefix(seq, s.tokens);
        for (size_t b = 0; b < hit.block_ids.size(); ++b)
          for (int64_t i = 0; i < bs; ++i)
            ASSERT_EQ(content[hit.block_ids[b]][i], s.tokens[b * bs + i])
                << "stale hit, op " << op;
        const int64_t n = 1 + pick(static_cast<int64_t>(s.tokens.size()) - hit.num_tokens);
        if (kv.allocate(seq, hit.num_tokens, n, hit, KvPrecision::kF32)) {
          s.computed = hit.num_tokens;
          seqs[seq] = s;
          compute(seq, n);
        } else {
          kv.free(seq);
          ASSERT_EQ(kv.pool().num_free_blocks(), free_before);
        }
      } else if (kind < 65 && !seqs.empty()) {  // the next chunk, or a decode token
        auto it = std::next(seqs.begin(), pick(static_cast<int64_t>(seqs.size())));
        SeqModel& s = it->second;
        if (s.computed == static_cast<int64_t>(s.tokens.size()))
          s.tokens.push_back(60 + static_cast<int32_t>(pick(4)));
        const int64_t n = 1 + pick(static_cast<int64_t>(s.tokens.size()) - s.computed);
        if (kv.allocate(it->first, s.computed, n, {}, KvPrecision::kF32))
          compute(it->first, n);
        else
          ASSERT_EQ(kv.pool().num_free_blocks(), free_before);
      } else if (kind < 75 && !seqs.empty()) {  // a sibling sharing what is computed
        auto it = std::next(seqs.begin(), pick(static_cast<int64_t>(seqs.size())));
        const SeqModel& parent = it->second;
        if (parent.computed == 0) continue;
        const int64_t upto = 1 + pick(parent.computed);
        SeqModel child;
        child.tokens.assign(parent.tokens.begin(), parent.tokens.begin() + upto);
        child.tokens.push_back(70);
        const SeqId seq = next_seq++;
        child.computed = kv.fork(it->first, seq, upto);
        ASSERT_EQ(child.computed, upto / bs * bs);
        seqs[seq] = child;
      } else if (!seqs.empty()) {
        auto it = std::next(seqs.begin(), pick(static_cast<int64_t>(seqs.size())));
        kv.free(it->first);
        seqs.erase(it);
      }
      expect_consistent();
      if (::testing::Test::HasFatalFailure()) return;
    }
    for (const auto& [seq, s] : seqs) kv.free(seq);
    EXPECT_EQ(kv.pool().num_free_blocks(), c.num_blocks);
    EXPECT_EQ(kv.num_sequences(), 0);
  }
}

}  // namespace
}  // namespace optimate::kv
