// Dequantization of every supported GGML type against gguf-py's (tests/data/model/dequant.json,
// made by tests/scripts/make_model_fixtures.py).
#include <cmath>

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/host_tensor.h"
#include "model_test_util.h"

namespace optimate {
namespace {

struct Case {
  const char* name;
  DType dtype;
};

class DequantizeTest : public ::testing::TestWithParam<Case> {};

TEST_P(DequantizeTest, MatchesGgufPy) {
  const auto fixtures = testing::read_json_file(testing::model_fixture("dequant.json"));
  const auto& c = fixtures.at(GetParam().name);
  const auto bytes = testing::from_hex(c.at("bytes_hex").get<std::string>());
  const auto expected = c.at("values").get<std::vector<float>>();
  ASSERT_EQ(bytes.size(), dtype_row_bytes(GetParam().dtype, expected.size()));

  std::vector<float> got(expected.size());
  dequantize_row(GetParam().dtype, bytes.data(), got.data(), static_cast<int64_t>(got.size()));
  int mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    // Same fp32 operations in the same order: equal up to the last bit, barring contraction.
    const float tol = 1e-6f * std::abs(expected[i]);
    if (!(std::abs(got[i] - expected[i]) <= tol) && ++mismatches <= 5) {
      ADD_FAILURE() << GetParam().name << " element " << i << ": got " << got[i] << ", gguf-py "
                    << expected[i];
    }
  }
  EXPECT_EQ(mismatches, 0);

  // The whole-tensor path agrees with the row path.
  HostTensor t;
  t.name = "t";
  t.dtype = GetParam().dtype;
  t.shape = {static_cast<int64_t>(expected.size())};
  t.data = bytes;
  EXPECT_EQ(to_f32(t), got);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantizeTest,
                         ::testing::Values(Case{"F32", DType::kF32}, Case{"F16", DType::kF16},
                                           Case{"BF16", DType::kBF16}, Case{"Q8_0", DType::kQ8_0},
                                           Case{"Q4_0", DType::kQ4_0}, Case{"Q4_1", DType::kQ4_1},
                                           Case{"Q4_K", DType::kQ4_K}, Case{"Q5_K", DType::kQ5_K},
                                           Case{"Q6_K", DType::kQ6_K}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(HostTensor, ToF32RejectsWrongByteCount) {
  std::vector<uint8_t> bytes(33);
  HostTensor t;
  t.name = "w";
  t.dtype = DType::kQ8_0;
  t.shape = {32};
  t.data = bytes;
  EXPECT_THROW(to_f32(t), Error);
}

TEST(HostTensor, MakeF32Tensor) {
  const HostTensor t = make_f32_tensor("x", {2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(t.num_elems(), 6);
  EXPECT_EQ(t.dim(-1), 3);
  EXPECT_EQ(t.data.size(), 24u);
  EXPECT_EQ(to_f32(t), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_THROW(make_f32_tensor("y", {2, 2}, {1, 2, 3}), Error);
}

}  // namespace
}  // namespace optimate
