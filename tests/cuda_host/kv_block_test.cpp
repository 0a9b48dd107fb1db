// The CUDA kernels' reading of the KV block format (backend/cuda/kv_block.h) against the
// format's own definition (kv::BlockLayout): every precision's row and scale offsets, entry
// and write-target bits.
#include "backend/cuda/kv_block.h"

#include <gtest/gtest.h>

#include "kv/kv_format.h"

namespace optimate::cuda {
namespace {

using kv::KvPrecision;

TEST(KvBlock, OffsetsAreBlockLayouts) {
  for (int64_t D : {64, 128})
    for (int64_t hkv : {1, 3, 8})
      for (int64_t bs : {1, 16, 32})
        for (KvPrecision p : {KvPrecision::kBF16, KvPrecision::kFP8, KvPrecision::kInt8, KvPrecision::kInt4}) {
          const kv::BlockLayout l(p, hkv, bs, D);
          const int code = kv::precision_code(p);
          EXPECT_EQ(kv_row_bytes(code, int(D)), l.row_bytes);
          EXPECT_EQ(kv_scale_bytes(code, int(D)), l.scale_bytes);
          for (int64_t h : {int64_t{0}, hkv - 1})
            for (int64_t t : {int64_t{0}, bs - 1}) {
              EXPECT_EQ(kv_codes_offset(code, int(bs), int(D), int(h), int(t)), l.row_offset(h, t));
              EXPECT_EQ(kv_scales_offset(code, int(hkv), int(bs), int(D), int(h), int(t)), l.scale_row_offset(h, t));
            }
          if (p == KvPrecision::kBF16) EXPECT_EQ(kv_bf16_block_bytes(hkv, bs, D), l.total_bytes);
        }
}

TEST(KvBlock, EntriesAndWriteTargets) {
  for (int code = 0; code < 4; ++code) {
    const int32_t e = kv::make_entry(code, 12345);
    EXPECT_EQ(kv_entry_code(e), code);
    EXPECT_EQ(kv_entry_slot(e), 12345);
    const int32_t target = kv_write_target(code, 12345, 16, 7);
    EXPECT_GE(target, 0);  // negative targets mean "write nothing"
    EXPECT_EQ(kv_target_code(target), code);
    EXPECT_EQ(kv_target_row(target), 12345 * 16 + 7);
  }
  EXPECT_EQ(kv_write_target(0, 9, 16, 3), 9 * 16 + 3);  // bf16 targets are plain rows
}

}  // namespace
}  // namespace optimate::cuda
