// safetensors parsing: valid files read back; hostile headers and offsets throw Error.
#include <random>

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/safetensors_file.h"
#include "model_test_util.h"

namespace optimate {
namespace {

using nlohmann::json;

std::vector<uint8_t> image(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out(8 + header.size() + data_bytes);
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  for (size_t i = 0; i < data_bytes; ++i) out[8 + header.size() + i] = static_cast<uint8_t>(i);
  return out;
}

json valid_header() {
  return {{"__metadata__", {{"format", "pt"}}},
          {"a", {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}}},
          {"b", {{"dtype", "BF16"}, {"shape", {3}}, {"data_offsets", {16, 22}}}},
          {"c", {{"dtype", "F16"}, {"shape", {1}}, {"data_offsets", {22, 24}}}}};
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    SafetensorsFile::parse(bytes, "hostile.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string error_for(const json& header, size_t data_bytes = 24) {
  return parse_error(image(header.dump(), data_bytes));
}

TEST(SafetensorsFile, ParsesValidFile) {
  const auto bytes = image(valid_header().dump(), 24);
  const auto f = SafetensorsFile::parse(bytes, "ok.safetensors");
  EXPECT_EQ(f->tensor_names(), (std::vector<std::string>{"a", "b", "c"}));
  const HostTensor b = f->tensor("b");
  EXPECT_EQ(b.dtype, DType::kBF16);
  EXPECT_EQ(b.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(b.data.data(), bytes.data() + 8 + valid_header().dump().size() + 16);
  EXPECT_FALSE(f->has_tensor("__metadata__"));
  EXPECT_THROW(f->tensor("d"), Error);
}

TEST(SafetensorsFile, HeaderMayBePaddedWithSpaces) {
  const auto bytes = image(valid_header().dump() + "      ", 24);
  EXPECT_EQ(SafetensorsFile::parse(bytes, "padded")->tensor_names().size(), 3u);
}

TEST(SafetensorsFile, EveryTruncationThrows) {
  const auto bytes = image(valid_header().dump(), 24);
  for (size_t len = 0; len < bytes.size(); ++len) {
    EXPECT_NE(parse_error({bytes.begin(), bytes.begin() + len}), "") << len;
  }
}

TEST(SafetensorsFile, RejectsBadHeaderLength) {
  auto bytes = image(valid_header().dump(), 24);
  for (uint64_t n : {uint64_t{0}, uint64_t{1} << 40, ~uint64_t{0}, uint64_t{bytes.size()}}) {
    std::memcpy(bytes.data(), &n, 8);
    EXPECT_NE(parse_error(bytes), "") << n;
  }
}

TEST(SafetensorsFile, RejectsMalformedHeaders) {
  EXPECT_NE(parse_error(image("{\"a\": ", 0)).find("JSON"), std::string::npos);
  EXPECT_NE(parse_error(image("[1, 2]", 0)).find("JSON object"), std::string::npos);
  EXPECT_NE(parse_error(image("{\"a\":" + std::string(100000, '[') , 0)), "");
  EXPECT_NE(error_for({{"a", {{"dtype", "F32"}, {"shape", {1}}}}}).find("'a'"), std::string::npos);
  EXPECT_NE(error_for({{"a", 5}}).find("'a'"), std::string::npos);
  EXPECT_NE(error_for({{"a", {{"dtype", 1}, {"shape", {1}}, {"data_offsets", {0, 4}}}}}, 4), "");
  EXPECT_NE(error_for({{"a", {{"dtype", "F32"}, {"shape", {-1}}, {"data_offsets", {0, 4}}}}}, 4),
            "");
  EXPECT_NE(error_for({{"a", {{"dtype", "F32"}, {"shape", "x"}, {"data_offsets", {0, 4}}}}}, 4),
            "");
  EXPECT_NE(error_for({{"a", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0}}}}}, 4), "");
}

TEST(SafetensorsFile, UnsupportedDtypeIsNamed) {
  try {
    SafetensorsFile::parse(
        image(json{{"ids", {{"dtype", "I64"}, {"shape", {1}}, {"data_offsets", {0, 8}}}}}.dump(), 8),
        "m.safetensors");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("'ids'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("I64"), std::string::npos);
  }
}

TEST(SafetensorsFile, RejectsBadOffsets) {
  auto with = [](const char* name, json offsets, json shape = {2, 2}) {
    json h = valid_header();
    h[name]["data_offsets"] = std::move(offsets);
    h[name]["shape"] = std::move(shape);
    return error_for(h);
  };
  EXPECT_NE(with("a", {0, 4096}).find("outside"), std::string::npos);
  EXPECT_NE(with("a", {16, 0}).find("outside"), std::string::npos);
  EXPECT_NE(with("a", {0, 12}).find("need"), std::string::npos);            // size mismatch
  EXPECT_NE(with("b", {8, 14}, {3}).find("overlap"), std::string::npos);
  EXPECT_NE(error_for(valid_header(), 30).find("trailing"), std::string::npos);
  json hole = valid_header();
  hole.erase("b");
  EXPECT_NE(error_for(hole).find("no tensor"), std::string::npos);
  EXPECT_NE(with("a", {0, 16}, {uint64_t{1} << 40, uint64_t{1} << 40}).find("absurd"),
            std::string::npos);
}

TEST(SafetensorsFile, RandomMutationsNeverCrash) {
  const auto valid = image(valid_header().dump(), 24);
  std::mt19937 rng(99);
  for (int iter = 0; iter < 3000; ++iter) {
    auto bytes = valid;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    try {
      const auto f = SafetensorsFile::parse(bytes, "mutated");
      for (const auto& name : f->tensor_names()) (void)to_f32(f->tensor(name));
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace optimate
