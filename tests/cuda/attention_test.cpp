// Paged decode attention (split-K and head clusters, GQA packed) and tiled tensor-core prefill
// attention against a CPU twin, over odd lengths, block boundaries, several GQA ratios, split
// counts and cluster sizes.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "attention_checks.h"
#include "backend/cuda/kv_cache_write.h"
#include "test_util.h"

namespace optimate::cuda {
namespace {

using namespace testing;

// A paged cache of bf16 blocks filled with random K/V, one shuffled block table per sequence.
struct CacheFixture {
  Bf16Data k, v;
  DeviceBuffer<uint16_t> d_k, d_v;
  AttentionCache cache;

  CacheFixture(const AttentionShape& s, const std::vector<int64_t>& seq_lens, uint32_t seed, int64_t bs = 16) {
    const int64_t hkv = s.num_kv_heads, d = s.head_dim;
    int64_t total = 0;
    cache.block_size = bs;
    for (int64_t len : seq_lens) {
      cache.max_blocks = std::max(cache.max_blocks, (len + bs - 1) / bs);
      total += (len + bs - 1) / bs;
    }
    const int64_t num_blocks = total + 3;
    k = random_bf16(num_blocks * hkv * bs * d, seed);
    v = random_bf16(num_blocks * hkv * bs * d, seed + 1);
    d_k = upload(k.bits);
    d_v = upload(v.bits);
    cache.arena = bf16_arena(d_k, d_v, hkv, bs, d);
    std::vector<int32_t> ids(num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed + 2));
    cache.tables.assign(seq_lens.size() * cache.max_blocks, 0);
    size_t next = 0;
    for (size_t i = 0; i < seq_lens.size(); ++i) {
      const int64_t len = seq_lens[i];
      cache.k_vals.emplace_back(len * hkv * d);
      cache.v_vals.emplace_back(len * hkv * d);
      for (int64_t b = 0; b < (len + bs - 1) / bs; ++b) cache.tables[i * cache.max_blocks + b] = ids[next++];
      for (int64_t pos = 0; pos < len; ++pos)
        for (int64_t h = 0; h < hkv; ++h)
          for (int64_t e = 0; e < d; ++e) {
            const int64_t at = ((cache.tables[i * cache.max_blocks + pos / bs] * hkv + h) * bs + pos % bs) * d + e;
            cache.k_vals.back()[(pos * hkv + h) * d + e] = k.values[at];
            cache.v_vals.back()[(pos * hkv + h) * d + e] = v.values[at];
          }
    }
  }
};

class DecodeAttention : public ::testing::TestWithParam<AttentionShape> {};

TEST_P(DecodeAttention, MatchesCpuTwinForEverySplitCount) {
  OPTIMATE_REQUIRE_GPU();
  const AttentionShape s = GetParam();
  const std::vector<int64_t> lens = {1, 15, 16, 17, 300, 1000, 2049};
  // 32-token blocks for the GQA-4 shape: chunks of 16 keys then start inside a block.
  const CacheFixture c(s, lens, 11, s.num_heads == 4 * s.num_kv_heads ? 32 : 16);
  check_decode_attention(c.cache, s, lens, {1, 2, 7, 64}, 12, "bf16 cache");
}

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeAttention,
                         ::testing::Values(AttentionShape{32, 8, 128}, AttentionShape{9, 3, 64},
                                           AttentionShape{14, 2, 64}, AttentionShape{4, 4, 128},
                                           AttentionShape{16, 2, 128}));

// Batches of 1 to 66 rows, where kAuto takes the head-cluster kernel on the H200's 132 SMs (in
// clusters up to 8 rows, one block per (row, kv head) past that): every kernel on the
// Llama-3-8B shape, contexts up to past 4096.
TEST(DecodeAttentionSmallBatch, EveryKernelMatchesCpuTwinFromOneTo66Rows) {
  OPTIMATE_REQUIRE_GPU();
  const AttentionShape s{32, 8, 128};
  const std::vector<int64_t> all = {300, 4097, 1024, 1, 16, 17, 2049, 33};
  for (size_t b : {1, 2, 4, 8, 40, 66}) {
    std::vector<int64_t> lens(b);
    for (size_t i = 0; i < b; ++i) lens[i] = all[i % all.size()] + int64_t(i / all.size());
    const CacheFixture c(s, lens, 41 + uint32_t(b));
    check_decode_attention(c.cache, s, lens, {1, 16}, 42, "bf16 cache, batch " + std::to_string(b));
    if (HasFailure()) return;
  }
}

// Prefill: five sequences, chunks that start after earlier context, lengths off the tile
// and block grid. Both the tensor-core tiles and the single-row fallback are checked.
class PrefillAttention : public ::testing::TestWithParam<AttentionShape> {};

TEST_P(PrefillAttention, CausalChunksMatchCpuTwin) {
  OPTIMATE_REQUIRE_GPU();
  const AttentionShape s = GetParam();
  const std::vector<PrefillChunk> chunks = {{0, 130}, {37, 70}, {200, 1}, {0, 64}, {5, 300}};
  std::vector<int64_t> lens;
  for (auto& ch : chunks) lens.push_back(ch.start + ch.n);
  const CacheFixture c(s, lens, 21);
  check_prefill_attention(c.cache, s, chunks, 22, "bf16 cache");
}

INSTANTIATE_TEST_SUITE_P(Shapes, PrefillAttention,
                         ::testing::Values(AttentionShape{32, 8, 128}, AttentionShape{9, 3, 64},
                                           AttentionShape{4, 4, 128}));

TEST(KvCacheWrite, ScattersTokensToTheirSlotsAndSkipsNegativeSlots) {
  OPTIMATE_REQUIRE_GPU();
  const int64_t hkv = 3, d = 64, bs = 16, nb = 5, T = 4, q_dim = 9 * d;
  const int64_t stride = q_dim + 2 * hkv * d;
  const Bf16Data qkv = random_bf16(T * stride, 31);
  const std::vector<int32_t> slots = {0, 17, 79, -1};
  auto d_qkv = upload(qkv.bits);
  auto d_slots = upload(slots);
  std::vector<uint16_t> zeros(nb * hkv * bs * d, 0);
  auto d_k = upload(zeros);
  auto d_v = upload(zeros);
  kv_cache_write(bf16_ptr(d_qkv) + q_dim, bf16_ptr(d_qkv) + q_dim + hkv * d, stride, bf16_arena(d_k, d_v, hkv, bs, d),
                 d_slots.get(), T, hkv, bs, d, nullptr);
  std::vector<float> ref_k(zeros.size(), 0.0f), ref_v(zeros.size(), 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    if (slots[t] < 0) continue;
    for (int64_t h = 0; h < hkv; ++h)
      for (int64_t i = 0; i < d; ++i) {
        const int64_t dst = ((slots[t] / bs * hkv + h) * bs + slots[t] % bs) * d + i;
        ref_k[dst] = qkv.values[t * stride + q_dim + h * d + i];
        ref_v[dst] = qkv.values[t * stride + q_dim + hkv * d + h * d + i];
      }
  }
  expect_close(download_bf16(d_k.get(), zeros.size()), ref_k, 0.0f, 0.0f, "k cache");
  expect_close(download_bf16(d_v.get(), zeros.size()), ref_v, 0.0f, 0.0f, "v cache");
}

}  // namespace
}  // namespace optimate::cuda
