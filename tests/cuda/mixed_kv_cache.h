// A KV cache whose blocks mix every precision, for the quantized-KV kernel tests: the arenas
// are written on the host by the CPU twin (kv::store_row) and the values a kernel should see are
// what kv::load_row reads back.
#pragma once

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "attention_checks.h"
#include "kv/kv_format.h"
#include "kv/kv_layout.h"
#include "test_util.h"

namespace optimate::cuda::testing {

using kv::KvPrecision;

inline const char* precision_name(KvPrecision p) { return kv::kv_precision_name(p); }

// Byte-for-byte comparison that names the first differing offsets.
inline void expect_bytes_equal(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                               const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (bad < 8)
      ADD_FAILURE() << what << ": byte " << i << " is " << int(got[i]) << ", the CPU twin wrote " << int(want[i]);
    ++bad;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << want.size() << " bytes differ";
}

// One layer's K and V arenas in a dynamic layout whose finest precision is int4, so blocks of
// bf16 (a page of 4 slots), fp8 and int8 (2 slots) and int4 (1 slot) all fit. Every block gets
// a page of its own; quantized ones sit inside it (fp8 and int8 at slot 2 of the page, int4 at
// slot 3) so offsets past a page's start are exercised too.
struct MixedKvCache {
  int64_t hkv, bs, d;
  kv::KvLayout layout;
  int64_t num_pages = 0;
  std::vector<uint8_t> k, v;                 // host arenas, num_slots * slot_bytes each
  std::vector<std::vector<int32_t>> tables;  // entries, per sequence
  std::vector<std::vector<float>> k_vals, v_vals;  // per sequence [pos, hkv, d]: load_row's values
  int64_t max_blocks = 0;

  MixedKvCache(int64_t num_kv_heads, int64_t block_size, int64_t head_dim, int64_t pages)
      : hkv(num_kv_heads), bs(block_size), d(head_dim),
        layout(kv::plan_kv_layout(KvPrecision::kBF16, KvPrecision::kBF16, KvPrecision::kInt4, num_kv_heads,
                                  block_size, head_dim)),
        k(static_cast<size_t>(pages * layout.page_slots * layout.slot_bytes), 0xa5),
        v(k.size(), 0x5a) {}

  int64_t num_slots() const { return static_cast<int64_t>(k.size()) / layout.slot_bytes; }

  // The entry of a new block of precision p on the next free page.
  int32_t new_block(KvPrecision p) {
    const int32_t page = static_cast<int32_t>(num_pages++);
    EXPECT_LE(num_pages * layout.page_slots, num_slots()) << "fixture too small";
    const int32_t in_page = p == KvPrecision::kBF16 ? 0 : p == KvPrecision::kInt4 ? 3 : 2;
    return kv::make_entry(kv::precision_code(p), page * static_cast<int32_t>(layout.page_slots) + in_page);
  }

  kv::BlockLayout block_layout(int32_t entry) const {
    return {kv::precision_of_code(kv::entry_code(entry), KvPrecision::kBF16), hkv, bs, d};
  }
  uint8_t* block(std::vector<uint8_t>& arena, int32_t entry) {
    return arena.data() + kv::entry_slot(entry) * layout.slot_bytes;
  }

  // Reshapes the random row of (position, kv head) of K (which 0) or V (1) before it is stored.
  using RowShaper = std::function<void(int64_t pos, int64_t head, int which, std::vector<float>& row)>;

  // A sequence of `len` random tokens; block i has precision pattern[i % size]. Values are
  // uniform in [lo, hi) (off-centre ranges give int4's min a part to play).
  void add_sequence(int64_t len, const std::vector<KvPrecision>& pattern, uint32_t seed, float lo = -1.0f,
                    float hi = 1.0f, const RowShaper& shape = nullptr) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    const int64_t blocks = (len + bs - 1) / bs;
    max_blocks = std::max(max_blocks, blocks);
    std::vector<int32_t> table;
    std::vector<float> kv_row(static_cast<size_t>(d));
    k_vals.emplace_back(static_cast<size_t>(len * hkv * d));
    v_vals.emplace_back(static_cast<size_t>(len * hkv * d));
    for (int64_t b = 0; b < blocks; ++b) table.push_back(new_block(pattern[static_cast<size_t>(b) % pattern.size()]));
    for (int64_t pos = 0; pos < len; ++pos) {
      const int32_t entry = table[static_cast<size_t>(pos / bs)];
      const kv::BlockLayout l = block_layout(entry);
      for (int which = 0; which < 2; ++which) {
        std::vector<uint8_t>& arena = which == 0 ? k : v;
        std::vector<float>& vals = which == 0 ? k_vals.back() : v_vals.back();
        for (int64_t h = 0; h < hkv; ++h) {
          for (auto& x : kv_row) x = dist(rng);
          if (shape) shape(pos, h, which, kv_row);
          kv::store_row(l, block(arena, entry), h, pos % bs, kv_row.data());
          kv::load_row(l, block(arena, entry), h, pos % bs, vals.data() + (pos * hkv + h) * d);
        }
      }
    }
    tables.push_back(table);
  }

  // The cache as the attention checks take it, over device copies of the arenas.
  AttentionCache attention_cache(uint8_t* k_arena, uint8_t* v_arena) const {
    AttentionCache c{{k_arena, v_arena, layout.slot_bytes, true}, bs, max_blocks, {}, k_vals, v_vals};
    c.tables.assign(tables.size() * max_blocks, 0);
    for (size_t i = 0; i < tables.size(); ++i) std::copy(tables[i].begin(), tables[i].end(), c.tables.begin() + i * max_blocks);
    return c;
  }
};

}  // namespace optimate::cuda::testing
