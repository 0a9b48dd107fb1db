// The CPU runner's cache operations over byte arenas, at every precision and with blocks of
// several precisions in one sequence: what write_kv stores is exactly kv::store_row's bytes,
// paged attention matches an fp64 reference over the dequantized values, and an in-place
// requantization leaves exactly the bytes of quantizing the block's values afresh.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/paged_attention.h"
#include "kv/kv_format.h"
#include "kv/kv_layout.h"

namespace optimate::cpu {
namespace {

using kv::KvPrecision;

struct Cache {
  AttentionDims dims;
  kv::KvLayout layout;
  std::vector<uint8_t> k, v;
  KvArenas arenas;

  Cache(const AttentionDims& d, const kv::KvLayout& l) : dims(d), layout(l) {
    k.assign(static_cast<size_t>(d.num_blocks * l.slot_bytes), 0xab);
    v.assign(k.size(), 0xcd);
    arenas = {k.data(), v.data(), l.slot_bytes, KvArenas::formats_for(l, d)};
  }
  // The value attention must see at position `pos` of a sequence with `table`.
  float value(const std::vector<uint8_t>& arena, std::span<const int32_t> table, int64_t pos, int64_t h, int64_t i) const {
    const int32_t e = table[pos / dims.block_size];
    std::vector<float> row(dims.head_dim);
    kv::load_row(arenas.format(e), arena.data() + kv::entry_slot(e) * layout.slot_bytes, h, pos % dims.block_size, row.data());
    return row[i];
  }
};

std::vector<float> random_floats(std::mt19937& rng, size_t n, float sd) {
  std::normal_distribution<float> d(0.1f, sd);
  std::vector<float> x(n);
  for (float& f : x) f = d(rng);
  return x;
}

// Mixed blocks in one int4-capable dynamic cache: full f32 pages, int8 halves, int4 quarters.
TEST(CpuPagedAttention, EveryPrecisionAndMixWithinASequence) {
  AttentionDims d{.num_heads = 6, .num_kv_heads = 2, .head_dim = 64, .block_size = 4, .num_blocks = 64};
  const kv::KvLayout layout = kv::plan_kv_layout(KvPrecision::kF32, KvPrecision::kF32, KvPrecision::kInt4,
                                                 d.num_kv_heads, d.block_size, d.head_dim);
  Cache c(d, layout);
  std::mt19937 rng(9);
  auto e = [](KvPrecision p, int32_t slot) { return kv::make_entry(kv::precision_code(p), slot); };
  // Sequence 0: 5 blocks of mixed precision (18 tokens); sequence 1: one precision per block kind.
  const std::vector<int32_t> t0 = {e(KvPrecision::kF32, 0), e(KvPrecision::kInt8, 4), e(KvPrecision::kInt4, 8),
                                   e(KvPrecision::kFP8, 6), e(KvPrecision::kInt4, 9)};
  const std::vector<int32_t> t1 = {e(KvPrecision::kInt4, 10), e(KvPrecision::kInt4, 11), e(KvPrecision::kF32, 12)};
  const int64_t n0 = 18, n1 = 9;
  const int64_t kv_dim = d.num_kv_heads * d.head_dim, q_dim = d.num_heads * d.head_dim;
  const int64_t stride = q_dim + 2 * kv_dim;
  const std::vector<float> qkv = random_floats(rng, static_cast<size_t>((n0 + n1) * stride), 1.0f);
  std::vector<AttentionSeq> seqs = {{0, n0, 0, t0}, {n0, n1, 0, t1}};
  write_kv(qkv.data() + q_dim, qkv.data() + q_dim + kv_dim, stride, c.arenas, seqs, d);

  // What was stored is exactly store_row's bytes.
  for (const auto& [table, first, n] : {std::tuple{&t0, int64_t{0}, n0}, std::tuple{&t1, n0, n1}})
    for (int64_t pos = 0; pos < n; ++pos)
      for (int64_t h = 0; h < d.num_kv_heads; ++h) {
        const int32_t entry = (*table)[pos / d.block_size];
        const kv::BlockLayout& f = c.arenas.format(entry);
        std::vector<uint8_t> want(f.total_bytes, 0);
        kv::store_row(f, want.data(), h, pos % d.block_size, qkv.data() + (first + pos) * stride + q_dim + h * d.head_dim);
        const uint8_t* got = c.k.data() + kv::entry_slot(entry) * layout.slot_bytes;
        EXPECT_EQ(std::memcmp(got + f.row_offset(h, pos % d.block_size), want.data() + f.row_offset(h, pos % d.block_size), f.row_bytes), 0);
        EXPECT_EQ(std::memcmp(got + f.scale_row_offset(h, pos % d.block_size),
                              want.data() + f.scale_row_offset(h, pos % d.block_size), f.scale_bytes), 0);
      }

  std::vector<float> out(static_cast<size_t>((n0 + n1) * q_dim));
  AttentionScratch scratch;
  const float scale = 1.0f / 8.0f;
  CpuThreadPool pool(2);
  paged_attention(qkv.data(), stride, c.arenas, out.data(), seqs, d, scale, pool, scratch);
  const int64_t group = d.num_heads / d.num_kv_heads;
  double worst = 0;
  for (const AttentionSeq& s : seqs)
    for (int64_t i = 0; i < s.num_tokens; ++i) {
      const int64_t row = s.first_row + i, ctx = i + 1;
      for (int64_t h = 0; h < d.num_heads; ++h) {
        const int64_t kvh = h / group;
        std::vector<double> p(ctx);
        double m = -1e300, sum = 0;
        for (int64_t j = 0; j < ctx; ++j) {
          double dot = 0;
          for (int64_t x = 0; x < d.head_dim; ++x)
            dot += double(qkv[row * stride + h * d.head_dim + x]) * c.value(c.k, s.block_table, j, kvh, x);
          p[j] = dot * scale;
          m = std::max(m, p[j]);
        }
        for (double& x : p) sum += (x = std::exp(x - m));
        for (int64_t x = 0; x < d.head_dim; ++x) {
          double o = 0;
          for (int64_t j = 0; j < ctx; ++j) o += p[j] * c.value(c.v, s.block_table, j, kvh, x);
          worst = std::max(worst, std::fabs(o / sum - out[row * q_dim + h * d.head_dim + x]));
        }
      }
    }
  EXPECT_LT(worst, 1e-4);
}

TEST(CpuPagedAttention, RequantizingInPlaceEqualsQuantizingAfresh) {
  AttentionDims d{.num_heads = 4, .num_kv_heads = 2, .head_dim = 64, .block_size = 8, .num_blocks = 8};
  for (KvPrecision full : {KvPrecision::kF32, KvPrecision::kBF16})
    for (KvPrecision to : {KvPrecision::kFP8, KvPrecision::kInt8, KvPrecision::kInt4}) {
      const kv::KvLayout layout = kv::plan_kv_layout(full, full, KvPrecision::kInt4, d.num_kv_heads,
                                                     d.block_size, d.head_dim);
      Cache c(d, layout);
      std::mt19937 rng(4);
      const std::vector<float> rows = random_floats(rng, static_cast<size_t>(d.block_size * 2 * d.num_kv_heads * d.head_dim), 2.0f);
      const int32_t from = kv::make_entry(0, 4);
      std::vector<AttentionSeq> seqs = {{0, d.block_size, 0, std::span(&from, 1)}};
      const int64_t stride = 2 * d.num_kv_heads * d.head_dim;
      write_kv(rows.data(), rows.data() + d.num_kv_heads * d.head_dim, stride, c.arenas, seqs, d);
      // The block's values as stored at full precision, quantized afresh...
      const kv::BlockLayout& ff = c.arenas.format(from);
      const kv::BlockLayout target(to, d.num_kv_heads, d.block_size, d.head_dim);
      std::vector<uint8_t> want(target.total_bytes, 0);
      std::vector<float> row(d.head_dim);
      for (int64_t h = 0; h < d.num_kv_heads; ++h)
        for (int64_t t = 0; t < d.block_size; ++t) {
          kv::load_row(ff, c.k.data() + 4 * layout.slot_bytes, h, t, row.data());
          kv::store_row(target, want.data(), h, t, row.data());
        }
      // ...equal the block requantized in place.
      std::vector<float> scratch;
      requantize_block(c.arenas, from, kv::make_entry(kv::precision_code(to), 4), d, scratch);
      EXPECT_EQ(std::memcmp(c.k.data() + 4 * layout.slot_bytes, want.data(), target.total_bytes), 0)
          << kv::kv_precision_name(full) << " -> " << kv::kv_precision_name(to);
      // The page before is untouched.
      EXPECT_EQ(c.k[4 * layout.slot_bytes - 1], 0xab);
    }
}

}  // namespace
}  // namespace optimate::cpu
