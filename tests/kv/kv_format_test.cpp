// The KV block formats: fp8 codes equal ml_dtypes' e4m3, each precision's round trip stays
// within its quantization step, quantized blocks take the bytes the capacity claims rest on,
// and block-table entries carry the precision.
#include <cmath>
#include <fstream>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kv/kv_format.h"

namespace optimate::kv {
namespace {

TEST(KvFormat, E4m3MatchesMlDtypes) {
  std::ifstream in(std::string(OPTIMATE_TEST_DATA_DIR) + "/kv/e4m3.json");
  ASSERT_TRUE(in);
  const nlohmann::json j = nlohmann::json::parse(in);
  const auto& values = j.at("values");
  const auto& codes = j.at("codes");
  int mismatches = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const float x = static_cast<float>(values[i].get<double>());
    const int want = codes[i].get<int>();
    const int got = f32_to_e4m3(x);
    if (got != want && ++mismatches <= 5) ADD_FAILURE() << x << ": got " << got << " want " << want;
    if (want != 0x7f && want != 0xff) EXPECT_EQ(e4m3_to_f32(static_cast<uint8_t>(want)), e4m3_to_f32(static_cast<uint8_t>(got)));
  }
  EXPECT_EQ(mismatches, 0);
  // Past the finite range the engine saturates, as CUDA's __NV_SATFINITE does.
  EXPECT_EQ(f32_to_e4m3(1000.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
}

std::vector<float> random_row(std::mt19937& rng, int64_t n, float scale) {
  std::normal_distribution<float> d(0.3f, scale);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

TEST(KvFormat, RoundTripsStayWithinTheQuantizationStep) {
  std::mt19937 rng(7);
  for (KvPrecision p : {KvPrecision::kF32, KvPrecision::kBF16, KvPrecision::kFP8, KvPrecision::kInt8,
                        KvPrecision::kInt4}) {
    const BlockLayout l(p, 2, 4, 128);
    std::vector<uint8_t> block(l.total_bytes, 0xcd);
    std::vector<std::vector<float>> rows;
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t t = 0; t < 4; ++t) {
        rows.push_back(random_row(rng, 128, t == 3 ? 20.0f : 1.0f));
        store_row(l, block.data(), h, t, rows.back().data());
      }
    std::vector<float> out(128);
    size_t r = 0;
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t t = 0; t < 4; ++t, ++r) {
        load_row(l, block.data(), h, t, out.data());
        const std::vector<float>& x = rows[r];
        float amax = 0, lo = x[0], hi = x[0];
        for (float v : x) amax = std::max(amax, std::fabs(v)), lo = std::min(lo, v), hi = std::max(hi, v);
        for (int64_t i = 0; i < 128; ++i) {
          float bound = 0;
          switch (p) {
            case KvPrecision::kF32: bound = 0; break;
            case KvPrecision::kBF16: bound = std::fabs(x[i]) * 0x1p-8f; break;
            case KvPrecision::kInt8: bound = amax / 127.0f * 0.5f * 1.0001f; break;
            // e4m3 has 3 mantissa bits: half a step is 1/16 of the value's binade, and the
            // subnormal step of 2^-9 of the scale below 2^-6.
            case KvPrecision::kFP8: bound = std::max(std::fabs(x[i]) / 16.0f, amax / 448.0f * 0x1p-10f) * 1.01f; break;
            // Half a step of (max - min) / 15 over each group of 64 (in whichever group the
            // element is), plus fp16 rounding of the scale and min.
            case KvPrecision::kInt4: bound = (hi - lo) / 15.0f * 0.5f * 1.02f + std::fabs(lo) * 1e-3f; break;
          }
          EXPECT_LE(std::fabs(out[i] - x[i]), bound)
              << kv_precision_name(p) << " head " << h << " token " << t << " element " << i;
        }
      }
  }
}

// int4 keys of a block made whole: a (scale, min) pair per channel over the block's tokens.
// A channel whose every token is large (the outlier channels real keys have) costs the other
// channels nothing, where a token's group of 64 spends its 16 levels on it.
TEST(KvFormat, Int4KeysPerChannelAreWrittenWholeAndKeepSmallChannelsExact) {
  const int64_t kvh = 2, bs = 16, hd = 64;
  const BlockLayout keys(KvPrecision::kInt4, kvh, bs, hd, Int4Keys::kPerChannel);
  const BlockLayout rows(KvPrecision::kInt4, kvh, bs, hd);
  EXPECT_TRUE(keys.channel_scales);
  EXPECT_FALSE(keys.row_writable());
  EXPECT_TRUE(rows.row_writable());
  EXPECT_EQ(keys.row_bytes, hd / 2);
  EXPECT_EQ(keys.total_bytes, kvh * bs * hd / 2 + kvh * hd * 4);
  std::mt19937 rng(3);
  std::vector<float> x = random_row(rng, kvh * bs * hd, 1.0f);
  for (int64_t h = 0; h < kvh; ++h)
    for (int64_t t = 0; t < bs; ++t) x[(h * bs + t) * hd + 5] += 40.0f;  // an outlier channel
  std::vector<uint8_t> a(keys.total_bytes), b(rows.total_bytes);
  store_block(keys, a.data(), x.data());
  store_block(rows, b.data(), x.data());
  EXPECT_THROW(store_row(keys, a.data(), 0, 0, x.data()), Error);
  double err_channel = 0, err_token = 0;
  std::vector<float> out(hd);
  for (int64_t h = 0; h < kvh; ++h)
    for (int64_t t = 0; t < bs; ++t) {
      const float* xr = x.data() + (h * bs + t) * hd;
      load_row(keys, a.data(), h, t, out.data());
      for (int64_t c = 0; c < hd; ++c) {
        float lo = INFINITY, hi = -INFINITY;
        for (int64_t u = 0; u < bs; ++u) {
          lo = std::min(lo, x[(h * bs + u) * hd + c]);
          hi = std::max(hi, x[(h * bs + u) * hd + c]);
        }
        // Half a step of the channel's range, plus fp16 rounding of its scale and min.
        EXPECT_LE(std::fabs(out[c] - xr[c]), (hi - lo) / 15.0f * 0.5f * 1.02f + std::fabs(lo) * 1e-3f)
            << "head " << h << " token " << t << " channel " << c;
        if (c != 5) err_channel += std::fabs(out[c] - xr[c]);
      }
      load_row(rows, b.data(), h, t, out.data());
      for (int64_t c = 0; c < hd; ++c)
        if (c != 5) err_token += std::fabs(out[c] - xr[c]);
    }
  EXPECT_LT(err_channel * 4, err_token);
  // Values and per-token keys are written row by row; store_block writes the same bytes.
  std::vector<uint8_t> c(rows.total_bytes);
  for (int64_t h = 0; h < kvh; ++h)
    for (int64_t t = 0; t < bs; ++t) store_row(rows, c.data(), h, t, x.data() + (h * bs + t) * hd);
  EXPECT_EQ(b, c);
}

TEST(KvFormat, QuantizedBlocksHoldMoreTokensInTheSameBytes) {
  // Llama-3-8B's shape: 8 KV heads of 128, blocks of 16 tokens; scales included.
  const double bf16 = BlockLayout(KvPrecision::kBF16, 8, 16, 128).total_bytes;
  EXPECT_GE(bf16 / BlockLayout(KvPrecision::kInt8, 8, 16, 128).total_bytes, 1.9);
  EXPECT_GE(bf16 / BlockLayout(KvPrecision::kFP8, 8, 16, 128).total_bytes, 1.9);
  EXPECT_GE(bf16 / BlockLayout(KvPrecision::kInt4, 8, 16, 128).total_bytes, 3.5);
  EXPECT_EQ(num_blocks_for_memory(1 << 30, 32, 8, 128, 16, KvPrecision::kInt4) /
                static_cast<double>(num_blocks_for_memory(1 << 30, 32, 8, 128, 16, KvPrecision::kBF16)) >= 3.5,
            true);
}

TEST(KvFormat, EntriesCarryThePrecision) {
  for (KvPrecision p : {KvPrecision::kF32, KvPrecision::kFP8, KvPrecision::kInt8, KvPrecision::kInt4}) {
    const int32_t e = make_entry(precision_code(p), 123456);
    EXPECT_EQ(entry_slot(e), 123456);
    EXPECT_EQ(precision_of_code(entry_code(e), KvPrecision::kF32), p);
    EXPECT_GE(e, 0);
  }
  EXPECT_EQ(make_entry(0, 77), 77);  // full-precision entries are plain slot ids
  EXPECT_THROW(BlockLayout(KvPrecision::kInt4, 2, 16, 48), Error);
}

}  // namespace
}  // namespace optimate::kv
