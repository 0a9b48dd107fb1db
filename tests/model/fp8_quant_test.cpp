// FP8 (e4m3) weights on the host: codes checked by hand against the format (1 sign, 4 exponent
// bits of bias 7, 3 mantissa bits; largest finite 448, smallest subnormal 2^-9), a row's scale
// and round trip, and the --quantization names.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "model/fp8_quant.h"

namespace optimate {
namespace {

// Quantizes one row whose largest magnitude is 448, so the scale is 1 and codes are e4m3(x).
uint8_t code_of(float x) {
  const float row[2] = {x, 448.0f};
  uint8_t codes[2];
  EXPECT_EQ(quantize_fp8_row(row, 2, codes), 1.0f);
  return codes[0];
}

TEST(Fp8Quant, CodesAreTheE4m3FormatRoundedToNearestEven) {
  EXPECT_EQ(code_of(1.0f), 0x38);        // exponent 7 (2^0), mantissa 0
  EXPECT_EQ(code_of(-2.5f), 0xC2);       // sign, exponent 8 (2^1), mantissa 2 (1.25)
  EXPECT_EQ(code_of(240.0f), 0x77);      // 1.875 * 2^7
  EXPECT_EQ(code_of(0.015625f), 0x08);   // 2^-6, the smallest normal
  EXPECT_EQ(code_of(0.001953125f), 0x01);  // 2^-9, the smallest subnormal
  EXPECT_EQ(code_of(0.0009765625f), 0x00);  // 2^-10: a tie between 0 and 2^-9, to even (0)
  EXPECT_EQ(code_of(0.0029296875f), 0x02);  // 1.5 * 2^-9: a tie, to even (2 * 2^-9)
  EXPECT_EQ(code_of(1.0625f), 0x38);     // halfway from 1 to 1.125: to even, 1
  EXPECT_EQ(code_of(1.1875f), 0x3A);     // halfway from 1.125 to 1.25: to even, 1.25
  EXPECT_EQ(code_of(1.1f), 0x39);        // nearer 1.125
  EXPECT_EQ(code_of(448.0f), 0x7E);      // the largest finite value
  EXPECT_EQ(code_of(-448.0f), 0xFE);
  for (uint8_t c : {0x38, 0xC2, 0x77, 0x08, 0x01, 0x7E})
    EXPECT_EQ(code_of(fp8_decode(c)), c) << "round trip of code " << int(c);
  EXPECT_EQ(fp8_decode(0x38), 1.0f);
  EXPECT_EQ(fp8_decode(0xC2), -2.5f);
  EXPECT_EQ(fp8_decode(0x01), 0.001953125f);
  EXPECT_EQ(fp8_decode(0x7E), 448.0f);
  EXPECT_TRUE(std::isnan(fp8_decode(0x7F)));
}

TEST(Fp8Quant, ARowScalesItsLargestMagnitudeTo448) {
  const float row[4] = {0.5f, -2.0f, 0.25f, 1.0f};
  uint8_t codes[4];
  const float scale = quantize_fp8_row(row, 4, codes);
  EXPECT_FLOAT_EQ(scale, 2.0f / 448.0f);
  EXPECT_EQ(codes[1], 0xFE);  // -2 / scale = -448
  EXPECT_EQ(codes[3], 0x76);  // 1 / scale = 224 = 1.75 * 2^7
  // Dequantized, every value is within half a step of 3 mantissa bits (2^-4 relative).
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(fp8_decode(codes[i]) * scale, row[i], std::fabs(row[i]) / 16) << i;

  const float zeros[3] = {0.0f, 0.0f, -0.0f};
  EXPECT_EQ(quantize_fp8_row(zeros, 3, codes), 0.0f);
  EXPECT_EQ(codes[0] | codes[1] | codes[2], 0);
}

TEST(Fp8Quant, MatrixRoundTripStaysWithinTheFormatsStep) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  const int64_t rows = 5, cols = 64;
  std::vector<float> w(rows * cols);
  for (float& v : w) v = dist(rng);
  const Fp8Matrix q = quantize_fp8_matrix(w.data(), rows, cols);
  ASSERT_EQ(q.codes.size(), size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = w[r * cols + c], back = fp8_decode(q.codes[r * cols + c]) * q.scales[r];
      // Normals: 2^-4 relative; below 2^-6 * scale the subnormal step 2^-9 * scale, half of it.
      EXPECT_LE(std::fabs(back - v), std::max(std::fabs(v) / 16, q.scales[r] * 0.001953125f / 2) * 1.0001f)
          << r << "," << c;
    }
}

TEST(Fp8Quant, QuantizationNamesAreCheckedWithTheAcceptedValues) {
  EXPECT_EQ(parse_choice<WeightQuantization>("none", "quantization"), WeightQuantization::kNone);
  EXPECT_EQ(parse_choice<WeightQuantization>("fp8", "quantization"), WeightQuantization::kFp8);
  EXPECT_EQ(choice_name(WeightQuantization::kFp8), "fp8");
  try {
    parse_choice<WeightQuantization>("int4", "quantization");
    FAIL() << "int4 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("none or fp8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace optimate
