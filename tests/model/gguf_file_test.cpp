// GGUF parsing: a valid file reads back; truncated and hostile files throw Error, naming the
// file and the key or tensor, without crashing or allocating out of proportion.
#include <random>

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/gguf_file.h"
#include "gguf_builder.h"
#include "model_test_util.h"

namespace optimate {
namespace {

using testing::f32_bytes;
using testing::GgufBuilder;

std::vector<uint8_t> valid_file() {
  GgufBuilder b;
  b.add_string("general.architecture", "llama");
  b.add_u32("llama.block_count", 2);
  b.add_f32("llama.rope.freq_base", 500000.0f);
  b.add_strings("tokenizer.ggml.tokens", {"<s>", "</s>", "hello"});
  b.add_i32s("tokenizer.ggml.token_type", {3, 3, 1});
  b.add_tensor("a", 0, {4, 2}, f32_bytes({0, 1, 2, 3, 4, 5, 6, 7}));
  std::vector<uint8_t> q8(34, 0);
  q8[1] = 0x3c;  // d = 1.0 in fp16
  q8[2] = 5;
  b.add_tensor("b", 8, {32}, q8);
  return b.build();
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    GgufFile::parse(bytes, "hostile.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GgufFile, ParsesValidFile) {
  const auto bytes = valid_file();
  const auto f = GgufFile::parse(bytes, "valid.gguf");
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->get_string("general.architecture", ""), "llama");
  EXPECT_EQ(f->get_int("llama.block_count", 0), 2);
  EXPECT_EQ(f->get_float("llama.rope.freq_base", 0), 500000.0);
  EXPECT_EQ(f->get_int("absent", 7), 7);
  EXPECT_EQ(f->at("tokenizer.ggml.tokens").as_strings(),
            (std::vector<std::string>{"<s>", "</s>", "hello"}));
  EXPECT_EQ(f->at("tokenizer.ggml.token_type").as_ints(), (std::vector<int64_t>{3, 3, 1}));
  ASSERT_EQ(f->tensor_infos().size(), 2u);

  const HostTensor a = f->tensor("a");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(to_f32(a), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  const HostTensor b = f->tensor("b");
  EXPECT_EQ(b.dtype, DType::kQ8_0);
  EXPECT_EQ(to_f32(b)[0], 5.0f);
  EXPECT_TRUE(f->has_tensor("b"));
  EXPECT_FALSE(f->has_tensor("c"));
}

TEST(GgufFile, MissingOrMistypedKeysNameTheKey) {
  const auto bytes = valid_file();
  const auto f = GgufFile::parse(bytes, "valid.gguf");
  try {
    f->at("llama.context_length");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("llama.context_length"), std::string::npos);
  }
  try {
    f->get_int("general.architecture", 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("general.architecture"), std::string::npos) << e.what();
  }
  try {
    f->tensor("nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("valid.gguf"), std::string::npos);
  }
}

TEST(GgufFile, ReadsFileWrittenByGgufPy) {
  const auto f = GgufFile::open(testing::model_fixture("tiny_llama.gguf"));
  EXPECT_EQ(f->get_string("general.architecture", ""), "llama");
  EXPECT_EQ(f->get_int("llama.block_count", 0), 2);
  EXPECT_EQ(f->at("tokenizer.ggml.tokens").as_strings().size(), 256u);
  EXPECT_EQ(f->tensor_infos().size(), 3u + 2u * 9u);
  EXPECT_EQ(f->tensor("blk.0.attn_q.weight").dtype, DType::kQ8_0);
  EXPECT_EQ(f->tensor("blk.0.ffn_down.weight").shape, (std::vector<int64_t>{64, 128}));
}

TEST(GgufFile, EveryTruncationThrows) {
  const auto bytes = valid_file();
  for (size_t len = 0; len < bytes.size(); ++len) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + len);
    EXPECT_NE(parse_error(prefix), "") << "prefix of " << len << " bytes parsed";
  }
}

TEST(GgufFile, RejectsBadHeaders) {
  auto bytes = valid_file();
  bytes[0] = 'X';
  EXPECT_NE(parse_error(bytes).find("magic"), std::string::npos);
  for (uint32_t version : {1u, 4u, 0x03000000u}) {
    bytes = valid_file();
    std::memcpy(&bytes[4], &version, 4);
    EXPECT_NE(parse_error(bytes).find("version"), std::string::npos);
  }
}

TEST(GgufFile, RejectsGiantCountsBeforeAllocating) {
  for (size_t field : {8u, 16u}) {  // tensor count, metadata count
    auto bytes = valid_file();
    const uint64_t giant = uint64_t{1} << 60;
    std::memcpy(&bytes[field], &giant, 8);
    EXPECT_NE(parse_error(bytes), "");
  }
  GgufBuilder b;
  b.add_strings("tokenizer.ggml.tokens", {"x"});
  auto bytes = b.build();
  // The array count sits after the 24-byte header, the key and the two type fields.
  const size_t count_at = 24 + 8 + std::string("tokenizer.ggml.tokens").size() + 4 + 4;
  const uint64_t giant = uint64_t{1} << 62;
  std::memcpy(&bytes[count_at], &giant, 8);
  EXPECT_NE(parse_error(bytes).find("tokenizer.ggml.tokens"), std::string::npos);
  bytes = b.build();
  std::memcpy(&bytes[count_at + 8], &giant, 8);  // the first string's length
  EXPECT_NE(parse_error(bytes), "");
}

TEST(GgufFile, RejectsHostileTensorInfos) {
  auto one = [](uint32_t type, std::vector<uint64_t> dims, size_t data_bytes,
                std::optional<uint64_t> offset = std::nullopt) {
    GgufBuilder b;
    b.add_tensor("w", type, std::move(dims), std::vector<uint8_t>(data_bytes), offset);
    return parse_error(b.build());
  };
  EXPECT_NE(one(0, {4}, 16, 4096).find("past the end"), std::string::npos);       // offset past end
  EXPECT_NE(one(0, {4}, 16, ~uint64_t{0} - 31).find("'w'"), std::string::npos);  // wraps around
  EXPECT_NE(one(0, {4}, 8).find("'w'"), std::string::npos);                      // data too short
  EXPECT_NE(one(0, {4}, 16, 4).find("aligned"), std::string::npos);
  EXPECT_NE(one(1000, {4}, 16).find("unknown GGML type"), std::string::npos);
  EXPECT_NE(one(6, {32}, 22).find("Q5_0"), std::string::npos);                   // known, unsupported
  EXPECT_NE(one(8, {31}, 34).find("block size"), std::string::npos);
  EXPECT_NE(one(0, {4, 1, 1, 1, 1}, 16).find("dimensions"), std::string::npos);
  EXPECT_NE(one(0, {4, 0}, 16).find("dimension"), std::string::npos);
  EXPECT_NE(one(0, {uint64_t{1} << 40, uint64_t{1} << 40}, 16).find("dimension"),
            std::string::npos);
  EXPECT_NE(one(0, {}, 16).find("dimensions"), std::string::npos);
}

TEST(GgufFile, RejectsOverlapsAndDuplicates) {
  GgufBuilder overlap;
  overlap.add_tensor("a", 0, {8}, std::vector<uint8_t>(32));
  overlap.add_tensor("b", 0, {8}, {}, 0);
  const std::string err = parse_error(overlap.build());
  EXPECT_NE(err.find("overlap"), std::string::npos) << err;

  GgufBuilder dup_tensor;
  dup_tensor.add_tensor("a", 0, {8}, std::vector<uint8_t>(32));
  dup_tensor.add_tensor("a", 0, {8}, std::vector<uint8_t>(32));
  EXPECT_NE(parse_error(dup_tensor.build()).find("duplicate tensor 'a'"), std::string::npos);

  GgufBuilder dup_key;
  dup_key.add_u32("k", 1);
  dup_key.add_u32("k", 2);
  EXPECT_NE(parse_error(dup_key.build()).find("duplicate metadata key 'k'"), std::string::npos);
}

TEST(GgufFile, RejectsBadAlignment) {
  GgufBuilder b;
  b.add_u32("general.alignment", 48);
  EXPECT_NE(parse_error(b.build()).find("general.alignment"), std::string::npos);
}

TEST(GgufFile, RandomMutationsNeverCrash) {
  const auto valid = valid_file();
  std::mt19937 rng(1234);
  int parsed = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto bytes = valid;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    try {
      const auto f = GgufFile::parse(bytes, "mutated.gguf");
      for (const auto& info : f->tensor_infos()) (void)to_f32(f->tensor(info.name));
      ++parsed;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(parsed, 0);  // many mutations only touch tensor data
}

}  // namespace
}  // namespace optimate
