// The CPU runner's cache operations over byte arenas, at every precision and with blocks of
// several precisions in one sequence: what write_kv stores is exactly kv::store_row's bytes,
// int4 blocks of a dynamic cache are made whole from full ones (keys per channel), paged
// attention matches an fp64 reference over the dequantized values, and an in-place
// requantization leaves exactly the bytes of quantizing the block's values afresh.
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/paged_attention.h"
#include "core/error.h"
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
    const kv::BlockLayout& f = &arena == &k ? arenas.k_format(e) : arenas.v_format(e);
    std::vector<float> row(dims.head_dim);
    kv::load_row(f, arena.data() + kv::entry_slot(e) * layout.slot_bytes, h, pos % dims.block_size, row.data());
    return row[i];
  }
};

std::vector<float> random_floats(std::mt19937& rng, size_t n, float sd) {
  std::normal_distribution<float> d(0.1f, sd);
  std::vector<float> x(n);
  for (float& f : x) f = d(rng);
  return x;
}

// Mixed blocks in one dynamic cache with per-channel int4 keys: full f32 pages of 6 slots, int8
// blocks of 3, int4 blocks of 2.
TEST(CpuPagedAttention, EveryPrecisionAndMixWithinASequence) {
  AttentionDims d{.num_heads = 6, .num_kv_heads = 2, .head_dim = 64, .block_size = 4, .num_blocks = 64};
  const kv::KvLayout layout = kv::plan_kv_layout(KvPrecision::kF32, KvPrecision::kF32, KvPrecision::kInt4,
                                                 d.num_kv_heads, d.block_size, d.head_dim, kv::Int4Keys::kPerChannel);
  Cache c(d, layout);
  std::mt19937 rng(9);
  auto e = [](KvPrecision p, int32_t slot) { return kv::make_entry(kv::precision_code(p), slot); };
  // Sequence 0: 5 blocks of mixed precision (18 tokens); sequence 1: one precision per block kind.
  // int4 blocks are written at full precision (6 slots from theirs) and then requantized.
  const std::vector<int32_t> t0 = {e(KvPrecision::kF32, 0), e(KvPrecision::kInt8, 6), e(KvPrecision::kInt4, 12),
                                   e(KvPrecision::kFP8, 9), e(KvPrecision::kInt4, 18)};
  const std::vector<int32_t> t1 = {e(KvPrecision::kInt4, 24), e(KvPrecision::kInt4, 30), e(KvPrecision::kF32, 36)};
  const int64_t n0 = 18, n1 = 9;
  const int64_t kv_dim = d.num_kv_heads * d.head_dim, q_dim = d.num_heads * d.head_dim;
  const int64_t stride = q_dim + 2 * kv_dim;
  const std::vector<float> qkv = random_floats(rng, static_cast<size_t>((n0 + n1) * stride), 1.0f);
  auto written = [](std::vector<int32_t> t) {
    for (int32_t& x : t)
      if (kv::entry_code(x) == kv::precision_code(KvPrecision::kInt4)) x = kv::entry_slot(x);
    return t;
  };
  const std::vector<int32_t> w0 = written(t0), w1 = written(t1);
  const std::vector<AttentionSeq> writes = {{0, n0, 0, w0}, {n0, n1, 0, w1}};
  write_kv(qkv.data() + q_dim, qkv.data() + q_dim + kv_dim, stride, c.arenas, writes, d);
  EXPECT_THROW(write_kv(qkv.data() + q_dim, qkv.data() + q_dim + kv_dim, stride, c.arenas,
                        std::vector<AttentionSeq>{{0, n0, 0, t0}}, d), Error);
  std::vector<float> rows;
  for (const std::vector<int32_t>* t : {&t0, &t1})
    for (int32_t entry : *t)
      if (kv::entry_code(entry) == kv::precision_code(KvPrecision::kInt4))
        requantize_block(c.arenas, kv::entry_slot(entry), entry, d, rows);
  std::vector<AttentionSeq> seqs = {{0, n0, 0, t0}, {n0, n1, 0, t1}};

  // What was stored is exactly store_row's bytes (values, and keys but int4 ones).
  for (const auto& [table, first, n] : {std::tuple{&t0, int64_t{0}, n0}, std::tuple{&t1, n0, n1}})
    for (int64_t pos = 0; pos < n; ++pos)
      for (int64_t h = 0; h < d.num_kv_heads; ++h)
        for (const bool keys : {true, false}) {
          const int32_t entry = (*table)[pos / d.block_size];
          const kv::BlockLayout& f = keys ? c.arenas.k_format(entry) : c.arenas.v_format(entry);
          if (!f.row_writable()) continue;
          std::vector<uint8_t> want(f.total_bytes, 0);
          kv::store_row(f, want.data(), h, pos % d.block_size,
                        qkv.data() + (first + pos) * stride + q_dim + (keys ? 0 : kv_dim) + h * d.head_dim);
          const uint8_t* got = (keys ? c.k : c.v).data() + kv::entry_slot(entry) * layout.slot_bytes;
          EXPECT_EQ(std::memcmp(got + f.row_offset(h, pos % d.block_size), want.data() + f.row_offset(h, pos % d.block_size), f.row_bytes), 0);
          EXPECT_EQ(std::memcmp(got + f.scale_row_offset(h, pos % d.block_size),
                                want.data() + f.scale_row_offset(h, pos % d.block_size), f.scale_bytes), 0);
        }
  EXPECT_FALSE(c.arenas.k_format(t1[0]).row_writable());
  EXPECT_TRUE(c.arenas.v_format(t1[0]).row_writable());

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
  AttentionDims d{.num_heads = 4, .num_kv_heads = 2, .head_dim = 64, .block_size = 8, .num_blocks = 12};
  for (KvPrecision full : {KvPrecision::kF32, KvPrecision::kBF16})
    for (const auto& [to, keys] : {std::pair{KvPrecision::kFP8, kv::Int4Keys::kPerToken},
                                   std::pair{KvPrecision::kInt8, kv::Int4Keys::kPerToken},
                                   std::pair{KvPrecision::kInt4, kv::Int4Keys::kPerToken},
                                   std::pair{KvPrecision::kInt4, kv::Int4Keys::kPerChannel}}) {
      const kv::KvLayout layout = kv::plan_kv_layout(full, full, KvPrecision::kInt4, d.num_kv_heads,
                                                     d.block_size, d.head_dim, keys);
      Cache c(d, layout);
      std::mt19937 rng(4);
      const std::vector<float> rows = random_floats(rng, static_cast<size_t>(d.block_size * 2 * d.num_kv_heads * d.head_dim), 2.0f);
      const int32_t from = kv::make_entry(0, 4);
      std::vector<AttentionSeq> seqs = {{0, d.block_size, 0, std::span(&from, 1)}};
      const int64_t stride = 2 * d.num_kv_heads * d.head_dim;
      write_kv(rows.data(), rows.data() + d.num_kv_heads * d.head_dim, stride, c.arenas, seqs, d);
      std::vector<uint8_t> wants[2];
      // The block's values as stored at full precision, quantized afresh...
      const int32_t to_entry = kv::make_entry(kv::precision_code(to), 4);
      std::vector<float> row(d.head_dim);
      for (const bool keys : {true, false}) {
        const std::vector<uint8_t>& arena = keys ? c.k : c.v;
        const kv::BlockLayout& ff = keys ? c.arenas.k_format(from) : c.arenas.v_format(from);
        std::vector<float> block(static_cast<size_t>(d.num_kv_heads * d.block_size * d.head_dim));
        for (int64_t h = 0; h < d.num_kv_heads; ++h)
          for (int64_t t = 0; t < d.block_size; ++t)
            kv::load_row(ff, arena.data() + 4 * layout.slot_bytes, h, t, block.data() + (h * d.block_size + t) * d.head_dim);
        const kv::BlockLayout& target = keys ? c.arenas.k_format(to_entry) : c.arenas.v_format(to_entry);
        std::vector<uint8_t> want(target.total_bytes, 0);
        kv::store_block(target, want.data(), block.data());
        wants[keys ? 0 : 1] = want;
      }
      // ...equal the block requantized in place.
      std::vector<float> scratch;
      requantize_block(c.arenas, from, to_entry, d, scratch);
      EXPECT_EQ(std::memcmp(c.k.data() + 4 * layout.slot_bytes, wants[0].data(), wants[0].size()), 0)
          << kv::kv_precision_name(full) << " -> " << kv::kv_precision_name(to);
      EXPECT_EQ(std::memcmp(c.v.data() + 4 * layout.slot_bytes, wants[1].data(), wants[1].size()), 0)
          << kv::kv_precision_name(full) << " -> " << kv::kv_precision_name(to);
      // The page before is untouched.
      EXPECT_EQ(c.k[4 * layout.slot_bytes - 1], 0xab);
    }
}

}  // namespace
}  // namespace optimate::cpu
