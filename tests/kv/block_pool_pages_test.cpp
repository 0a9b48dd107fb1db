// The paged pool of a dynamic cache: a page holds one full-precision block, or 2 8-bit or 4
// int4 ones. Requantizing a full block in place frees exactly the rest of its page for blocks
// of the new size, the prefix cache keeps quantized blocks away from full-precision requests,
// and every slot comes back at the end.
#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "core/error.h"
#include "kv/block_pool.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_format.h"

namespace optimate::kv {
namespace {

// Llama-3-8B's KV shape: the full block is 32 KiB, an int8 one just over 16 KiB.
KvLayout dynamic(KvPrecision finest, Int4Keys keys = Int4Keys::kPerToken) {
  return plan_kv_layout(KvPrecision::kBF16, KvPrecision::kBF16, finest, 8, 16, 128, keys);
}

TEST(BlockPoolPages, LayoutsFitEveryBlockInItsSlots) {
  for (const KvLayout& l : {dynamic(KvPrecision::kFP8), dynamic(KvPrecision::kInt8), dynamic(KvPrecision::kInt4),
                            dynamic(KvPrecision::kInt4, Int4Keys::kPerChannel)}) {
    const KvPrecision finest = *l.finest;
    for (KvPrecision p : {KvPrecision::kBF16, KvPrecision::kFP8, KvPrecision::kInt8, KvPrecision::kInt4}) {
      if (!l.holds(p)) continue;
      EXPECT_GE(l.slots_for(p) * l.slot_bytes, BlockLayout(p, 8, 16, 128).total_bytes)
          << kv_precision_name(finest) << " " << kv_precision_name(p);
      EXPECT_GE(l.slots_for(p) * l.slot_bytes, BlockLayout(p, 8, 16, 128, l.int4_keys).total_bytes)
          << kv_precision_name(finest) << " " << kv_precision_name(p) << " keys";
    }
    EXPECT_EQ(l.slot_bytes % 128, 0);
  }
  EXPECT_EQ(dynamic(KvPrecision::kInt8).page_slots, 2);
  EXPECT_EQ(dynamic(KvPrecision::kInt4).page_slots, 4);
  EXPECT_EQ(dynamic(KvPrecision::kInt4).int4_keys, Int4Keys::kPerToken);
  // Keys scaled per channel: pages of 6 slots, 3 int4 blocks or 2 8-bit ones.
  const KvLayout channel = dynamic(KvPrecision::kInt4, Int4Keys::kPerChannel);
  EXPECT_EQ(channel.page_slots, 6);
  EXPECT_EQ(channel.slots_for(KvPrecision::kInt4), 2);
  EXPECT_EQ(channel.slots_for(KvPrecision::kInt8), 3);
  EXPECT_THROW(dynamic(KvPrecision::kInt8, Int4Keys::kPerChannel), Error);
  EXPECT_FALSE(dynamic(KvPrecision::kInt8).holds(KvPrecision::kInt4));  // would not fit a slot
  // The dynamic layout costs little full-precision capacity.
  const KvLayout fixed = plan_kv_layout(KvPrecision::kBF16, KvPrecision::kBF16, std::nullopt, 8, 16, 128);
  // int4's pages are sized for four blocks with their fp16 scales (or three with per-channel
  // key scales): 12.5% over a bf16 block.
  EXPECT_LE(static_cast<double>(dynamic(KvPrecision::kInt8).page_slots * dynamic(KvPrecision::kInt8).slot_bytes) /
                fixed.slot_bytes, 1.04);
  EXPECT_LE(static_cast<double>(dynamic(KvPrecision::kInt4).page_slots * dynamic(KvPrecision::kInt4).slot_bytes) /
                fixed.slot_bytes, 1.125);
  EXPECT_LE(static_cast<double>(channel.page_slots * channel.slot_bytes) / fixed.slot_bytes, 1.125);
}

TEST(BlockPoolPages, RequantizingFreesWhatTheArithmeticSays) {
  // int8: 4 pages of 2 slots. Each full block requantized frees one int8 block: the first of
  // a pair stays at its slot and frees the other half of its page, the second moves into that
  // half and frees its whole page, where a full-precision block fits again.
  BlockPool pool(dynamic(KvPrecision::kInt8), 8, 16, false);
  auto full = pool.allocate(4, KvPrecision::kBF16);
  ASSERT_EQ(full.size(), 4u);
  EXPECT_EQ(pool.num_free_blocks(KvPrecision::kInt8), 0);
  EXPECT_TRUE(pool.allocate(1, KvPrecision::kInt8).empty());
  for (int i = 0; i < 4; ++i) {
    const int32_t q = pool.requantize(full[i], KvPrecision::kInt8);
    if (i % 2 == 0) EXPECT_EQ(entry_slot(q), entry_slot(full[i]));
    else EXPECT_EQ(entry_slot(q), entry_slot(full[i - 1]) + 1);
    EXPECT_EQ(pool.precision(q), KvPrecision::kInt8);
    EXPECT_EQ(pool.num_free_blocks(KvPrecision::kInt8), i + 1);
    EXPECT_EQ(pool.num_free_blocks(KvPrecision::kBF16), (i + 1) / 2);
    full[i] = q;
  }
  EXPECT_DOUBLE_EQ(pool.usage(), 0.5);
  EXPECT_EQ(pool.counters().requantized_blocks, 4);
  auto more = pool.allocate(4, KvPrecision::kInt8);  // what waiting requests can now use
  EXPECT_EQ(more.size(), 4u);
  EXPECT_DOUBLE_EQ(pool.usage(), 1.0);
  pool.release(full);
  pool.release(more);
  EXPECT_EQ(pool.num_free_blocks(KvPrecision::kBF16), 4);
  EXPECT_EQ(pool.live_blocks().at(KvPrecision::kInt8), 0);

  // int4: 3 pages of 4 slots. A full block requantized to int4 frees 3 int4 blocks; to int8, 1.
  BlockPool p4(dynamic(KvPrecision::kInt4), 12, 16, false);
  auto f = p4.allocate(3, KvPrecision::kBF16);
  p4.requantize(f[0], KvPrecision::kInt4);
  EXPECT_EQ(p4.num_free_blocks(KvPrecision::kInt4), 3);
  p4.requantize(f[1], KvPrecision::kInt8);
  EXPECT_EQ(p4.num_free_blocks(KvPrecision::kInt8), 1);
  EXPECT_EQ(p4.num_free_blocks(KvPrecision::kBF16), 0);
  EXPECT_DOUBLE_EQ(p4.usage(), (1.0 + 2.0 + 4.0) / 12.0);
  // With per-channel int4 keys, 3 pages of 6 slots: a block requantized to int4 frees 2 more.
  BlockPool p6(dynamic(KvPrecision::kInt4, Int4Keys::kPerChannel), 18, 16, false);
  auto g = p6.allocate(3, KvPrecision::kBF16);
  p6.requantize(g[0], KvPrecision::kInt4);
  EXPECT_EQ(p6.num_free_blocks(KvPrecision::kInt4), 2);
  p6.requantize(g[1], KvPrecision::kInt8);
  EXPECT_EQ(p6.num_free_blocks(KvPrecision::kInt8), 1);
  EXPECT_DOUBLE_EQ(p6.usage(), (2.0 + 3.0 + 6.0) / 18.0);
  // Shared, free or already quantized blocks are refused.
  p4.touch(std::span(f).subspan(2, 1));
  EXPECT_THROW(p4.requantize(f[2], KvPrecision::kInt4), Error);
  EXPECT_THROW(p4.requantize(make_entry(precision_code(KvPrecision::kInt4), entry_slot(f[0])), KvPrecision::kInt4), Error);
  // A static pool never requantizes.
  BlockPool fixed(4, 16, false);
  auto b = fixed.allocate(1, KvPrecision::kF32);
  EXPECT_THROW(fixed.requantize(b[0], KvPrecision::kInt8), Error);
}

TEST(BlockPoolPages, FullPrecisionRequestsTakeNoQuantizedPrefix) {
  KvCacheManager kv(dynamic(KvPrecision::kInt8), 16, 4, true);
  const std::vector<int32_t> p = {5, 6, 7, 8, 9, 10, 11, 12, 13};
  ASSERT_TRUE(kv.allocate(0, 0, 9, {}, KvPrecision::kBF16));
  kv.commit(0, p, 9);
  const RequantizeOp op = kv.requantize(0, 1, KvPrecision::kInt8);  // the second block
  EXPECT_EQ(entry_slot(op.from_entry), entry_slot(op.to_entry));
  EXPECT_EQ(kv.block_ids(0)[1], op.to_entry);
  // A full-precision request stops at the quantized block; a quantized one takes both.
  EXPECT_EQ(kv.find_cached_prefix(1, p, KvPrecision::kBF16).num_tokens, 4);
  EXPECT_EQ(kv.find_cached_prefix(2, p, KvPrecision::kInt8).num_tokens, 8);
  kv.free(0);
  EXPECT_EQ(kv.pool().num_free_slots(), 16);
}

TEST(BlockPoolPages, RandomTrafficConservesSlots) {
  // Allocations of every precision, touches of cached blocks, requantizations and releases in
  // a seeded random order: slot counts always add up and every slot returns.
  std::mt19937 rng(3);
  BlockPool pool(dynamic(KvPrecision::kInt4), 64, 16, true);
  std::vector<int32_t> held;
  const KvPrecision kinds[] = {KvPrecision::kBF16, KvPrecision::kInt8, KvPrecision::kFP8, KvPrecision::kInt4};
  int64_t next_hash = 1;
  for (int step = 0; step < 5000; ++step) {
    const int action = static_cast<int>(rng() % 4);
    if (action == 0 || held.empty()) {
      const KvPrecision p = kinds[rng() % 4];
      for (int32_t e : pool.allocate(1 + rng() % 3, p)) {
        held.push_back(e);
        pool.cache_block(e, next_hash++);
      }
    } else if (action == 1) {
      const size_t i = rng() % held.size();
      pool.release(std::span(held).subspan(i, 1));
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (action == 2) {
      const size_t i = rng() % held.size();
      if (is_full_precision(pool.precision(held[i])) && pool.ref_count(held[i]) == 1)
        held[i] = pool.requantize(held[i], rng() % 2 ? KvPrecision::kInt4 : KvPrecision::kInt8);
    } else {
      const int64_t h = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(next_hash));
      if (auto e = pool.cached_block(h)) {
        pool.touch(std::span(&*e, 1));
        held.push_back(*e);
      }
    }
    // Each distinct held block counts once, and holds one reference per appearance in `held`.
    int64_t distinct = 0;
    std::vector<int32_t> seen;
    for (int32_t e : held) {
      if (std::find(seen.begin(), seen.end(), e) != seen.end()) continue;
      seen.push_back(e);
      distinct += pool.layout().slots_for(pool.precision(e));
      ASSERT_EQ(std::count(held.begin(), held.end(), e), pool.ref_count(e)) << "step " << step;
    }
    ASSERT_EQ(pool.num_free_slots(), pool.num_slots() - distinct) << "step " << step;
  }
  pool.release(held);
  EXPECT_EQ(pool.num_free_slots(), 64);
  EXPECT_EQ(pool.num_free_blocks(KvPrecision::kBF16), 16);
}

}  // namespace
}  // namespace optimate::kv
