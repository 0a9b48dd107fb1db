// Quantized KV blocks on the GPU against the CPU twin (kv/kv_format.h): the KV write (its own
// kernel and the fused QKV GEMV's epilogue) and in-place requantization leave exactly the bytes
// kv::store_row writes, and both decode attention kernels and the prefill kernel read fp8,
// int8 and int4 blocks, alone and mixed in a batch and within a sequence, as an fp64 reference
// over kv::load_row's values.
#include <algorithm>
#include <cmath>

#include "backend/cuda/gemv.h"
#include "backend/cuda/kv_cache_write.h"
#include "backend/cuda/kv_requantize.h"
#include "mixed_kv_cache.h"

namespace optimate::cuda {
namespace {

using namespace testing;

constexpr KvPrecision kAll[] = {KvPrecision::kBF16, KvPrecision::kFP8, KvPrecision::kInt8, KvPrecision::kInt4};

// Device copies of a MixedKvCache's arenas.
struct DeviceArenas {
  DeviceBuffer<uint8_t> k, v;
  explicit DeviceArenas(const MixedKvCache& c) : k(upload(c.k)), v(upload(c.v)) {}
  KvArena arena(const MixedKvCache& c) { return {k.get(), v.get(), c.layout.slot_bytes, true}; }
};

int32_t target_of(int32_t entry, int64_t bs, int64_t token) {
  return kv_write_target(kv::entry_code(entry), kv::entry_slot(entry), static_cast<int>(bs), static_cast<int>(token));
}

TEST(KvCacheWrite, QuantizesEachTokenAtItsBlocksPrecisionAsStoreRow) {
  OPTIMATE_REQUIRE_GPU();
  for (int64_t D : {64, 128}) {
    const int64_t hkv = D == 64 ? 3 : 2, bs = 16, q_dim = 4 * D, stride = q_dim + 2 * hkv * D;
    MixedKvCache c(hkv, bs, D, 8);
    std::vector<int32_t> entries;
    for (KvPrecision p : kAll) entries.push_back(c.new_block(p));
    // Nine tokens over the four precisions, each at its own row, and a padding row.
    const int64_t T = 10;
    std::vector<int32_t> targets;
    for (int64_t t = 0; t + 1 < T; ++t) targets.push_back(target_of(entries[t % 4], bs, (5 * t + 1) % bs));
    targets.push_back(-1);
    const Bf16Data qkv = random_bf16(T * stride, 41, -3.0f, 2.0f);
    std::vector<uint8_t> want_k = c.k, want_v = c.v;
    for (int64_t t = 0; t + 1 < T; ++t) {
      const int32_t e = entries[t % 4];
      const kv::BlockLayout l = c.block_layout(e);
      for (int64_t h = 0; h < hkv; ++h) {
        kv::store_row(l, c.block(want_k, e), h, (5 * t + 1) % bs, qkv.values.data() + t * stride + q_dim + h * D);
        kv::store_row(l, c.block(want_v, e), h, (5 * t + 1) % bs,
                      qkv.values.data() + t * stride + q_dim + (hkv + h) * D);
      }
    }
    DeviceArenas d(c);
    auto d_qkv = upload(qkv.bits);
    auto d_targets = upload(targets);
    kv_cache_write(bf16_ptr(d_qkv) + q_dim, bf16_ptr(d_qkv) + q_dim + hkv * D, stride, d.arena(c), d_targets.get(), T,
                   hkv, bs, D, nullptr);
    const std::string what = "kv_cache_write head dim " + std::to_string(D);
    expect_bytes_equal(download(d.k.get(), c.k.size()), want_k, what + " K");
    expect_bytes_equal(download(d.v.get(), c.v.size()), want_v, what + " V");
  }
}

// The fused QKV GEMV writes the rotated k and v it stores in y; quantized rows are finished by
// the last warp to write them, so the bytes must equal store_row over y's values, twice over
// (the row counters must return to zero).
TEST(KvCacheWrite, FusedGemvEpilogueQuantizesAsStoreRow) {
  OPTIMATE_REQUIRE_GPU();
  struct Case { int64_t heads, kv_heads, head_dim; };
  for (const Case& cs : {Case{4, 2, 128}, Case{6, 1, 64}, Case{8, 8, 64}}) {
    const int64_t m = 5, k = 512, D = cs.head_dim, bs = 16;
    const int64_t q_dim = cs.heads * D, kv_dim = cs.kv_heads * D, n = q_dim + 2 * kv_dim;
    MixedKvCache c(cs.kv_heads, bs, D, 8);
    std::vector<int32_t> entries;
    for (KvPrecision p : kAll) entries.push_back(c.new_block(p));
    const std::vector<int32_t> pos = {0, 1, 17, 4095, 131071};
    // Row t writes token tokens[t] of block entries[block_of[t]] (int8, int4, none, fp8, bf16).
    const std::vector<int64_t> tokens = {0, 5, 0, 15, 3};
    const std::vector<int> block_of = {2, 3, -1, 1, 0};
    std::vector<int32_t> targets;
    for (int64_t t = 0; t < m; ++t)
      targets.push_back(block_of[t] < 0 ? -1 : target_of(entries[block_of[t]], bs, tokens[t]));
    std::vector<float> inv_freq(D / 2);
    for (int64_t i = 0; i < D / 2; ++i) inv_freq[i] = float(std::pow(500000.0, -2.0 * i / D));
    const Bf16Data x = random_bf16(m * k, 31);
    const Bf16Data w = random_bf16(n * k, 32, -0.1f, 0.1f);
    auto d_x = upload(x.bits);
    auto d_w = upload(w.bits);
    auto d_pos = upload(pos);
    auto d_targets = upload(targets);
    auto d_freq = upload(inv_freq);
    for (const auto& [kernel, split] : {std::pair{GemvKernel::kPairs, 1}, std::pair{GemvKernel::kPairs, 2},
                                        std::pair{GemvKernel::kMma, 0}, std::pair{GemvKernel::kMma, 2},
                                        std::pair{GemvKernel::kMmaDeep, 0}}) {
      DeviceArenas d(c);
      DeviceBuffer<uint16_t> d_y(m * n);
      DeviceBuffer<int> counters(kGemvMaxRows * 2 * cs.kv_heads);
      OPTIMATE_CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
      GemvParams p;
      p.m = m;
      p.n = n;
      p.k = k;
      p.x = bf16_ptr(d_x);
      p.w = bf16_ptr(d_w);
      p.y = d_y.get();
      p.epilogue = GemvEpilogue::kRopeKvWrite;
      p.positions = d_pos.get();
      p.inv_freq = d_freq.get();
      p.slot_mapping = d_targets.get();
      p.kv_cache = d.arena(c);
      p.kv_row_counters = counters.get();
      p.num_heads = cs.heads;
      p.num_kv_heads = cs.kv_heads;
      p.head_dim = D;
      p.block_size = bs;
      p.kernel = kernel;
      p.split_k = split;
      const std::string what = "fused QKV heads " + std::to_string(cs.heads) + "/" + std::to_string(cs.kv_heads) +
                               " D " + std::to_string(D) + " kernel " + gemv_kernel_name(kernel) + " split " +
                               std::to_string(split);
      for (int rep = 0; rep < 2; ++rep) {
        gemv(p, nullptr);
        const std::vector<float> y = download_bf16(d_y.get(), m * n);
        std::vector<uint8_t> want_k = c.k, want_v = c.v;
        for (int64_t t = 0; t < m; ++t) {
          if (block_of[t] < 0) continue;
          const int32_t e = entries[block_of[t]];
          for (int64_t h = 0; h < cs.kv_heads; ++h) {
            kv::store_row(c.block_layout(e), c.block(want_k, e), h, tokens[t], y.data() + t * n + q_dim + h * D);
            kv::store_row(c.block_layout(e), c.block(want_v, e), h, tokens[t], y.data() + t * n + q_dim + kv_dim + h * D);
          }
        }
        expect_bytes_equal(download(d.k.get(), c.k.size()), want_k, what + " K, run " + std::to_string(rep));
        expect_bytes_equal(download(d.v.get(), c.v.size()), want_v, what + " V, run " + std::to_string(rep));
        EXPECT_EQ(download(counters.get(), counters.size()), std::vector<int>(counters.size(), 0)) << what;
      }
    }
  }
}

// Full bf16 blocks of two layers turned into fp8, int8 and int4 blocks at the same slot, and one
// into an int8 block in another page: the quantized block's bytes are store_row's over the bf16
// values, and nothing else changes.
// The scratch holds three (block, layer, K/V) units, so several batches run.
TEST(KvRequantize, BlocksBecomeStoreRowOfTheirBf16Values) {
  OPTIMATE_REQUIRE_GPU();
  for (int64_t D : {64, 128}) {
    const int64_t hkv = 2, bs = 16, L = 2;
    MixedKvCache c(hkv, bs, D, 6);
    const int64_t arena_bytes = static_cast<int64_t>(c.k.size());
    std::vector<uint8_t> host(static_cast<size_t>(L * 2 * arena_bytes), 0x3c);
    std::vector<int32_t> full;
    for (int i = 0; i < 5; ++i) full.push_back(c.new_block(KvPrecision::kBF16));
    const kv::BlockLayout bf16(KvPrecision::kBF16, hkv, bs, D);
    std::mt19937 rng(51);
    std::uniform_real_distribution<float> dist(-2.0f, 1.0f);
    std::vector<float> row(D);
    for (int64_t a = 0; a < 2 * L; ++a)
      for (int32_t e : full)
        for (int64_t h = 0; h < hkv; ++h)
          for (int64_t t = 0; t < bs; ++t) {
            for (auto& x : row) x = dist(rng);
            kv::store_row(bf16, host.data() + a * arena_bytes + kv::entry_slot(e) * c.layout.slot_bytes, h, t, row.data());
          }
    const std::vector<KvPrecision> to = {KvPrecision::kFP8, KvPrecision::kInt8, KvPrecision::kInt4, KvPrecision::kInt8};
    std::vector<int32_t> ops;
    std::vector<uint8_t> want = host;
    for (size_t i = 0; i < to.size(); ++i) {
      const int32_t slot = kv::entry_slot(full[i]);
      ops.push_back(full[i]);
      ops.push_back(kv::make_entry(kv::precision_code(to[i]), slot));
      const kv::BlockLayout q(to[i], hkv, bs, D);
      for (int64_t a = 0; a < 2 * L; ++a) {
        uint8_t* block = want.data() + a * arena_bytes + slot * c.layout.slot_bytes;
        std::vector<uint8_t> quantized(static_cast<size_t>(q.total_bytes));
        for (int64_t h = 0; h < hkv; ++h)
          for (int64_t t = 0; t < bs; ++t) {
            kv::load_row(bf16, block, h, t, row.data());
            kv::store_row(q, quantized.data(), h, t, row.data());
          }
        std::memcpy(block, quantized.data(), quantized.size());
      }
    }
    // The fifth block moves: its int8 bytes land in the unused sixth page, its bf16 bytes stay.
    const int32_t moved = 5 * static_cast<int32_t>(c.layout.page_slots) + 1;
    ops.push_back(full[4]);
    ops.push_back(kv::make_entry(kv::precision_code(KvPrecision::kInt8), moved));
    const kv::BlockLayout q8(KvPrecision::kInt8, hkv, bs, D);
    for (int64_t a = 0; a < 2 * L; ++a) {
      const uint8_t* src = want.data() + a * arena_bytes + kv::entry_slot(full[4]) * c.layout.slot_bytes;
      uint8_t* dst = want.data() + a * arena_bytes + moved * c.layout.slot_bytes;
      std::vector<uint8_t> quantized(static_cast<size_t>(q8.total_bytes));
      for (int64_t h = 0; h < hkv; ++h)
        for (int64_t t = 0; t < bs; ++t) {
          kv::load_row(bf16, src, h, t, row.data());
          kv::store_row(q8, quantized.data(), h, t, row.data());
        }
      std::memcpy(dst, quantized.data(), quantized.size());
    }
    auto d_arenas = upload(host);
    auto d_ops = upload(ops);
    const KvRequantizeShape shape{d_arenas.get(), c.num_slots(), c.layout.slot_bytes, L, hkv, bs, D};
    const int64_t unit = kv_requantize_scratch_bytes(shape, 1) / (2 * L);
    DeviceBuffer<uint8_t> scratch(3 * unit);
    kv_requantize(shape, d_ops.get(), static_cast<int64_t>(ops.size() / 2), scratch.get(), 3 * unit, nullptr);
    expect_bytes_equal(download(d_arenas.get(), host.size()), want, "requantize head dim " + std::to_string(D));
  }
}

// Six sequences: one per precision, one whose blocks cycle through all four, and one that
// cycles the other way (values off centre in every other sequence, for int4's min).
MixedKvCache mixed_sequences(const AttentionShape& s, int64_t bs, const std::vector<int64_t>& lens, uint32_t seed) {
  int64_t pages = 0;
  for (int64_t len : lens) pages += (len + bs - 1) / bs;
  MixedKvCache c(s.num_kv_heads, bs, s.head_dim, pages);
  const std::vector<std::vector<KvPrecision>> patterns = {
      {KvPrecision::kBF16}, {KvPrecision::kFP8}, {KvPrecision::kInt8}, {KvPrecision::kInt4},
      {KvPrecision::kInt8, KvPrecision::kBF16, KvPrecision::kInt4, KvPrecision::kFP8},
      {KvPrecision::kInt4, KvPrecision::kFP8, KvPrecision::kBF16, KvPrecision::kInt8}};
  for (size_t i = 0; i < lens.size(); ++i)
    c.add_sequence(lens[i], patterns[i % patterns.size()], seed + uint32_t(i), i % 2 ? -1.5f : -1.0f,
                   i % 2 ? 0.5f : 1.0f);
  return c;
}

class MixedDecodeAttention : public ::testing::TestWithParam<AttentionShape> {};

TEST_P(MixedDecodeAttention, BothKernelsMatchTheReferenceOverLoadRowValues) {
  OPTIMATE_REQUIRE_GPU();
  const AttentionShape s = GetParam();
  const std::vector<int64_t> lens = {300, 17, 1000, 129, 1000, 2049};
  // 32-token blocks for the GQA-4 shape: chunks of 16 keys then start inside a block.
  const MixedKvCache c = mixed_sequences(s, s.num_heads == 4 * s.num_kv_heads ? 32 : 16, lens, 61);
  DeviceArenas d(c);
  check_decode_attention(c.attention_cache(d.k.get(), d.v.get()), s, lens, {1, 7, 64}, 62, "mixed KV cache");
}

INSTANTIATE_TEST_SUITE_P(Shapes, MixedDecodeAttention,
                         ::testing::Values(AttentionShape{32, 8, 128}, AttentionShape{9, 3, 64},
                                           AttentionShape{16, 2, 128}, AttentionShape{4, 4, 128}));

// A static quantized cache: every block at one precision, which the arena promises
// (uniform_code), so decode attention runs the kernel built for that precision alone.
class UniformDecodeAttention : public ::testing::TestWithParam<AttentionShape> {};

TEST_P(UniformDecodeAttention, EachPrecisionsOwnKernelMatchesTheReference) {
  OPTIMATE_REQUIRE_GPU();
  const AttentionShape s = GetParam();
  const std::vector<int64_t> lens = {300, 17, 1000, 129, 2049};
  for (KvPrecision p : {KvPrecision::kFP8, KvPrecision::kInt8, KvPrecision::kInt4}) {
    int64_t pages = 0;
    for (int64_t len : lens) pages += (len + 15) / 16;
    MixedKvCache c(s.num_kv_heads, 16, s.head_dim, pages);
    for (size_t i = 0; i < lens.size(); ++i)
      c.add_sequence(lens[i], {p}, 91 + uint32_t(i), i % 2 ? -1.5f : -1.0f, i % 2 ? 0.5f : 1.0f);
    DeviceArenas d(c);
    AttentionCache cache = c.attention_cache(d.k.get(), d.v.get());
    cache.arena.uniform_code = kv::precision_code(p);
    check_decode_attention(cache, s, lens, {1, 7, 64}, 92, std::string("uniform ") + kv::kv_precision_name(p));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, UniformDecodeAttention,
                         ::testing::Values(AttentionShape{32, 8, 128}, AttentionShape{9, 3, 64}));

// Rows that stress the quantized decode path's use of scales: K rows of zeros (a score column
// whose key scale is 0), V rows of zeros (a V scale of 0, in the first chunk too), int4 groups
// of one repeated value (scale 0, all in the min), V rows 1000 times smaller for the first 40
// positions and 8 times larger past 600 (the outputs' unit is set by the first quantized
// chunk), and rows of one large element.
TEST(QuantizedDecodeAttention, ZeroScalesConstantGroupsAndScaleSpreadMatchTheReference) {
  OPTIMATE_REQUIRE_GPU();
  const AttentionShape s{32, 8, 128};
  const std::vector<int64_t> lens = {1000, 77, 1000};
  const std::vector<std::vector<KvPrecision>> patterns = {
      {KvPrecision::kInt8}, {KvPrecision::kFP8, KvPrecision::kInt4}, {KvPrecision::kBF16, KvPrecision::kInt4, KvPrecision::kFP8}};
  int64_t pages = 0;
  for (int64_t len : lens) pages += (len + 15) / 16;
  MixedKvCache c(s.num_kv_heads, 16, s.head_dim, pages);
  auto shape = [](int64_t pos, int64_t head, int which, std::vector<float>& row) {
    if (which == 0 && pos % 5 == 3) std::fill(row.begin(), row.end(), 0.0f);
    if (which == 1 && (pos % 7 == 2 || pos < 3)) std::fill(row.begin(), row.end(), 0.0f);
    if (pos % 11 == 4) std::fill(row.begin() + 64, row.end(), 0.375f + 0.125f * float(head));
    if (which == 1 && pos < 40) for (auto& x : row) x *= 1e-3f;
    if (which == 1 && pos > 600) for (auto& x : row) x *= 8.0f;
    if (pos % 13 == 6) row[static_cast<size_t>(pos % 128)] = which == 0 ? 40.0f : -12.0f;
  };
  for (size_t i = 0; i < lens.size(); ++i) c.add_sequence(lens[i], patterns[i], 81 + uint32_t(i), -1.0f, 1.5f, shape);
  DeviceArenas d(c);
  check_decode_attention(c.attention_cache(d.k.get(), d.v.get()), s, lens, {1, 5}, 82, "quantized edge rows");
}

// Prefill chunks whose context mixes precisions (the sequences of mixed_sequences).
class MixedPrefillAttention : public ::testing::TestWithParam<AttentionShape> {};

TEST_P(MixedPrefillAttention, CausalChunksMatchTheReferenceOverLoadRowValues) {
  OPTIMATE_REQUIRE_GPU();
  const AttentionShape s = GetParam();
  const std::vector<PrefillChunk> chunks = {{0, 130}, {37, 70}, {200, 1}, {0, 64}, {5, 300}, {64, 129}};
  std::vector<int64_t> lens;
  for (auto& ch : chunks) lens.push_back(ch.start + ch.n);
  const MixedKvCache c = mixed_sequences(s, 16, lens, 71);
  DeviceArenas d(c);
  check_prefill_attention(c.attention_cache(d.k.get(), d.v.get()), s, chunks, 72, "mixed KV cache");
}

INSTANTIATE_TEST_SUITE_P(Shapes, MixedPrefillAttention,
                         ::testing::Values(AttentionShape{32, 8, 128}, AttentionShape{9, 3, 64},
                                           AttentionShape{4, 4, 128}));

}  // namespace
}  // namespace optimate::cuda
