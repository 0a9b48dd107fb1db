// The host tier through the KV cache manager, against a model of the arenas' bytes: each
// device and host slot holds a tag, the copies of a step are applied as a runner applies them
// (in order, or batch by batch with each batch in reverse order, as parallel copies may land),
// and every live sequence must read back exactly the tokens it computed. Swap-out and swap-in,
// prefix blocks kept in host memory and restored, a host region too small, and seeded random
// interleavings that end with every block free on both tiers.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "kv/kv_cache_manager.h"

namespace optimate::kv {
namespace {

constexpr int64_t kBlockSize = 2;

uint64_t tag(int32_t token, int64_t pos) { return (static_cast<uint64_t>(token) << 20) ^ static_cast<uint64_t>(pos + 1); }

// The runner's arenas, one tag per (slot, row), and how it applies a step.
struct Arenas {
  std::vector<std::vector<uint64_t>> device, host;
  Arenas(int64_t device_slots, int64_t host_slots)
      : device(device_slots, std::vector<uint64_t>(kBlockSize, 0)),
        host(host_slots, std::vector<uint64_t>(kBlockSize, 0)) {}

  void copy(const KvCopy& c) {
    for (int32_t k = 0; k < c.num_slots; ++k) {
      if (c.direction == CopyDirection::kToHost) host.at(c.host_slot + k) = device.at(c.device_slot + k);
      else device.at(c.device_slot + k) = host.at(c.host_slot + k);
    }
  }
  // Batch by batch, each batch backwards: only right when copy_batches put no conflict inside.
  void apply(const std::vector<KvCopy>& copies) {
    size_t begin = 0;
    for (size_t end : copy_batches(copies)) {
      for (size_t i = end; i > begin; --i) copy(copies[i - 1]);
      begin = end;
    }
  }
  void write(const KvCacheManager& kv, SeqId seq, const std::vector<int32_t>& tokens, int64_t from, int64_t to) {
    const auto ids = kv.block_ids(seq);
    for (int64_t p = from; p < to; ++p) device.at(entry_slot(ids[p / kBlockSize]))[p % kBlockSize] = tag(tokens[p], p);
  }
  ::testing::AssertionResult reads(const KvCacheManager& kv, SeqId seq, const std::vector<int32_t>& tokens,
                                   int64_t num_computed) {
    const auto ids = kv.block_ids(seq);
    for (int64_t p = 0; p < num_computed; ++p) {
      const uint64_t got = device.at(entry_slot(ids[p / kBlockSize]))[p % kBlockSize];
      if (got != tag(tokens[p], p))
        return ::testing::AssertionFailure() << "sequence " << seq << " position " << p << " reads " << got
                                             << ", wrote " << tag(tokens[p], p);
    }
    return ::testing::AssertionSuccess();
  }
};

std::vector<int32_t> tokens_from(int32_t first, int64_t count) {
  std::vector<int32_t> out(static_cast<size_t>(count));
  std::iota(out.begin(), out.end(), first);
  return out;
}

// Computes all of `tokens` for a new sequence, as a prefill does: blocks, the step's copies,
// the KV written, full blocks registered.
void prefill(KvCacheManager& kv, Arenas& arenas, SeqId seq, const std::vector<int32_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  ASSERT_TRUE(kv.allocate(seq, 0, n, {}, KvPrecision::kF32));
  arenas.apply(kv.take_copies());
  arenas.write(kv, seq, tokens, 0, n);
  kv.commit(seq, tokens, n);
}

KvLayout f32_layout() { return {.full = KvPrecision::kF32, .base = KvPrecision::kF32}; }

TEST(KvCopyBatches, SplitWhereACopyMeetsAnEarlierOne) {
  using D = CopyDirection;
  const std::vector<KvCopy> copies = {
      {D::kToHost, 0, 0, 1}, {D::kToHost, 1, 1, 1},  // independent
      {D::kToDevice, 0, 5, 1},                        // writes device 0, read above: new batch
      {D::kToDevice, 2, 1, 1},                        // reads host 1, written above (previous batch): same batch
      {D::kToHost, 3, 5, 1},                          // writes host 5, read in this batch: new batch
      {D::kToHost, 4, 6, 2},                          // independent
      {D::kToHost, 7, 7, 1},                          // host 7 written by the copy above (2 slots): new batch
  };
  EXPECT_EQ(copy_batches(copies), (std::vector<size_t>{2, 4, 6, 7}));
  EXPECT_TRUE(copy_batches({}).empty());
}

TEST(HostTier, SwapOutAndBackInRestoresEveryToken) {
  KvCacheManager kv(f32_layout(), 8, kBlockSize, true, {4, 0});
  Arenas arenas(8, 4);
  const auto a = tokens_from(10, 7);
  prefill(kv, arenas, 0, a);
  EXPECT_EQ(kv.num_slots_for_tokens(0, 7), 4);
  ASSERT_TRUE(kv.swap_out(0, 7));
  EXPECT_TRUE(kv.is_swapped(0));
  EXPECT_EQ(kv.pool().num_free_blocks(), 8);
  EXPECT_EQ(kv.host().num_free_swap_blocks(), 0);
  arenas.apply(kv.take_copies());
  // Another sequence takes every device block (and overwrites them) while it is out.
  prefill(kv, arenas, 1, tokens_from(50, 16));
  EXPECT_FALSE(kv.swap_in(0)) << "no device room";
  EXPECT_TRUE(kv.take_copies().empty());
  kv.free(1);
  ASSERT_TRUE(kv.swap_in(0));
  arenas.apply(kv.take_copies());
  EXPECT_TRUE(arenas.reads(kv, 0, a, 7));
  EXPECT_EQ(kv.host().num_free_swap_blocks(), 4);
  EXPECT_EQ(kv.tier_counters().swapped_out_blocks, 4);
  EXPECT_EQ(kv.tier_counters().swapped_in_blocks, 4);
  kv.free(0);
  EXPECT_EQ(kv.pool().num_free_blocks(), 8);
}

TEST(HostTier, SwapOutRefusedWhenTheHostRegionIsFullOrThereIsNothingToCopy) {
  KvCacheManager kv(f32_layout(), 8, kBlockSize, true, {2, 0});
  const auto a = tokens_from(10, 7);
  ASSERT_TRUE(kv.allocate(0, 0, 7, {}, KvPrecision::kF32));
  EXPECT_FALSE(kv.swap_out(0, 0)) << "nothing computed";
  EXPECT_FALSE(kv.swap_out(0, 7)) << "4 blocks, 2 host slots";
  EXPECT_TRUE(kv.take_copies().empty());
  EXPECT_EQ(kv.block_ids(0).size(), 4u);
  EXPECT_TRUE(kv.swap_out(0, 3)) << "the first 2 blocks fit";
  kv.free(0);  // freed while swapped out: host blocks come back
  EXPECT_EQ(kv.host().num_free_swap_blocks(), 2);
  KvCacheManager no_host(8, kBlockSize, true);
  ASSERT_TRUE(no_host.allocate(0, 0, 4, {}, KvPrecision::kF32));
  EXPECT_FALSE(no_host.swap_out(0, 4));
}

TEST(HostTier, EvictedPrefixBlocksAreKeptAndRestored) {
  // 4 device blocks, a host prefix region of 3.
  KvCacheManager kv(f32_layout(), 4, kBlockSize, true, {0, 3});
  Arenas arenas(4, 3);
  const auto a = tokens_from(10, 8);
  prefill(kv, arenas, 0, a);
  kv.free(0);
  // B takes every block: A's cached blocks are evicted tail first and kept on the host, where
  // the region's 3 blocks keep the last 3 evicted: A's head, the part a later request shares.
  prefill(kv, arenas, 1, tokens_from(90, 8));
  EXPECT_EQ(kv.tier_counters().host_prefix_stored_blocks, 4);
  EXPECT_EQ(kv.host().num_cached_prefix_blocks(), 3);
  kv.free(1);
  const PrefixHit hit = kv.find_cached_prefix(2, a);
  EXPECT_EQ(hit.num_device_tokens, 0);
  EXPECT_EQ(hit.num_tokens, 6);  // 3 blocks: all a lookup may take (the last token is computed)
  kv.free(2);
}

TEST(HostTier, HostHitIsCopiedBackAndCounted) {
  KvCacheManager kv(f32_layout(), 4, kBlockSize, true, {0, 8});
  Arenas arenas(4, 8);
  const auto a = tokens_from(10, 7);
  prefill(kv, arenas, 0, a);
  kv.free(0);
  prefill(kv, arenas, 1, tokens_from(90, 8));
  kv.free(1);
  // A again, one token longer: 3 full blocks are in host memory.
  auto a2 = a;
  a2.push_back(77);
  const PrefixHit hit = kv.find_cached_prefix(2, a2);
  EXPECT_EQ(hit.num_device_tokens, 0);
  EXPECT_EQ(hit.num_tokens, 6);
  EXPECT_EQ(hit.host_block_ids.size(), 3u);
  ASSERT_TRUE(kv.allocate(2, hit.num_tokens, 2, hit, KvPrecision::kF32));
  kv.record_prefix_lookup(8, hit);
  arenas.apply(kv.take_copies());
  EXPECT_TRUE(arenas.reads(kv, 2, a2, 6));
  EXPECT_EQ(kv.tier_counters().host_prefix_queries_tokens, 8);
  EXPECT_EQ(kv.tier_counters().host_prefix_hits_tokens, 6);
  EXPECT_EQ(kv.pool().counters().prefix_hits_tokens, 0);
  // The restored blocks are cached on the device again: a second lookup hits there.
  const PrefixHit again = kv.find_cached_prefix(3, a2);
  EXPECT_EQ(again.num_device_tokens, 6);
  kv.free(3);
  kv.free(2);
}

// Random admissions (with prefix hits on both tiers), growth, swaps and frees; every step's
// copies applied; every live sequence reads its own tokens; at the end every block is free.
TEST(HostTier, RandomInterleavingsKeepEveryTokenAndReturnEveryBlock) {
  KvTierCounters total;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    // Even seeds: a dynamic cache, pages of 2 slots holding one f32 block or two int8 ones.
    const bool dynamic = seed % 2 == 0;
    KvLayout layout{.full = KvPrecision::kF32, .base = KvPrecision::kF32};
    if (dynamic) {
      layout.finest = KvPrecision::kInt8;
      layout.page_slots = 2;
    }
    const int64_t ps = layout.page_slots;
    const int64_t device_slots = (12 + rng() % 12) / ps * ps, swap_slots = rng() % 10 / ps * ps,
                  prefix_slots = rng() % 10 / ps * ps;
    KvCacheManager kv(layout, device_slots, kBlockSize, true, {swap_slots, prefix_slots});
    Arenas arenas(device_slots, swap_slots + prefix_slots);
    struct Seq {
      std::vector<int32_t> tokens;
      int64_t computed = 0;
      bool swapped = false;
      KvPrecision precision = KvPrecision::kF32;
    };
    std::map<SeqId, Seq> seqs;
    SeqId next = 0;
    const std::vector<std::vector<int32_t>> prompts = {tokens_from(100, 9), tokens_from(200, 5), tokens_from(300, 12)};
    for (int op = 0; op < 400; ++op) {
      const int kind = static_cast<int>(rng() % 5);
      if (kind == 0 || seqs.empty()) {  // admit a prompt (a shared one, maybe extended)
        Seq s;
        s.tokens = prompts[rng() % prompts.size()];
        for (int extra = static_cast<int>(rng() % 4); extra > 0; --extra) s.tokens.push_back(static_cast<int32_t>(rng() % 50));
        const SeqId id = next++;
        if (dynamic && rng() % 2) s.precision = KvPrecision::kInt8;
        const PrefixHit hit = kv.find_cached_prefix(id, s.tokens, s.precision);
        const int64_t n = static_cast<int64_t>(s.tokens.size()) - hit.num_tokens;
        if (!kv.allocate(id, hit.num_tokens, n, hit, s.precision)) {
          kv.free(id);
        } else {
          kv.record_prefix_lookup(n + hit.num_tokens, hit);
          arenas.apply(kv.take_copies());
          arenas.write(kv, id, s.tokens, hit.num_tokens, static_cast<int64_t>(s.tokens.size()));
          s.computed = static_cast<int64_t>(s.tokens.size());
          kv.commit(id, s.tokens, s.computed);
          seqs[id] = s;
        }
      } else {
        auto it = seqs.begin();
        std::advance(it, rng() % seqs.size());
        const SeqId id = it->first;
        Seq& s = it->second;
        if (kind == 1 && !s.swapped) {  // decode one token
          s.tokens.push_back(static_cast<int32_t>(rng() % 50));
          if (kv.allocate(id, s.computed, 1, {}, s.precision)) {
            arenas.apply(kv.take_copies());
            arenas.write(kv, id, s.tokens, s.computed, s.computed + 1);
            kv.commit(id, s.tokens, ++s.computed);
          } else {
            s.tokens.pop_back();
          }
        } else if (kind == 2 && !s.swapped) {
          s.swapped = kv.swap_out(id, s.computed);
        } else if (kind == 3 && s.swapped) {
          s.swapped = !kv.swap_in(id);
        } else if (kind == 4) {
          kv.free(id);
          seqs.erase(it);
          continue;
        }
        arenas.apply(kv.take_copies());
      }
      for (const auto& [id, s] : seqs)
        if (!s.swapped) ASSERT_TRUE(arenas.reads(kv, id, s.tokens, s.computed)) << "seed " << seed << " op " << op;
    }
    total.swapped_in_blocks += kv.tier_counters().swapped_in_blocks;
    total.host_prefix_hits_tokens += kv.tier_counters().host_prefix_hits_tokens;
    total.host_prefix_stored_blocks += kv.tier_counters().host_prefix_stored_blocks;
    for (const auto& [id, s] : seqs) kv.free(id);
    EXPECT_EQ(kv.pool().num_free_slots(), device_slots) << seed;
    EXPECT_EQ(kv.host().num_free_swap_blocks(), swap_slots / ps) << seed;
    EXPECT_EQ(kv.num_sequences() + kv.num_swapped(), 0) << seed;
  }
  // The interleavings did exercise both regions.
  EXPECT_GT(total.swapped_in_blocks, 100);
  EXPECT_GT(total.host_prefix_stored_blocks, 100);
  EXPECT_GT(total.host_prefix_hits_tokens, 100);
}

}  // namespace
}  // namespace optimate::kv
