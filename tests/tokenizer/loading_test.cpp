// Loading rules: UTF-8 replacement, unknown pre-tokenizer styles and model kinds are clear
// errors naming the file.
#include <fstream>

#include <gtest/gtest.h>

#include "core/error.h"
#include "fixtures.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/utf8.h"

namespace optimate {
namespace {

using testing::read_fixture;

TEST(Utf8, ReplacementMatchesPython) {
  for (const auto& c : read_fixture("utf8_replace.json").at("cases")) {
    const std::string bytes = testing::from_hex(c.at("bytes_hex").get<std::string>());
    EXPECT_EQ(tokenizer::sanitize_utf8(bytes), c.at("text").get<std::string>()) << c.dump();
    EXPECT_FALSE(tokenizer::is_valid_utf8(bytes));
  }
  EXPECT_TRUE(tokenizer::is_valid_utf8("h\xC3\xA9llo \xF0\x9F\x98\x80"));
}

TEST(Utf8, InvalidInputEncodesAsItsReplacement) {
  auto tok = testing::smollm2();
  OPTIMATE_REQUIRE_TOKENIZER(tok);
  EXPECT_EQ(tok->encode("caf\xC3"), tok->encode("caf\xEF\xBF\xBD"));
}

TEST(RegexSplit, WhitespaceClassesAreRewritten) {
  EXPECT_EQ(tokenizer::rewrite_whitespace_classes(R"([^\s\p{L}])"),
            R"([^\t\n\x{0B}\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\p{L}])");
  // U+180E is not White_Space (Unicode 6.3+), unlike PCRE2's own \s.
  const tokenizer::RegexSplitter splitter(R"(\s+)");
  EXPECT_EQ(splitter.split("a\xE1\xA0\x8E" "b").size(), 1u);
  EXPECT_EQ(splitter.split("a b").size(), 3u);
}

std::string write_temp(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(Loading, UnsupportedPieceIsAClearErrorNamingTheFile) {
  const std::string path = write_temp(
      "unigram_tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}, "added_tokens": []})");
  try {
    Tokenizer::from_tokenizer_json(path, "");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Unigram"), std::string::npos) << e.what();
  }
  const std::string metaspace = write_temp(
      "metaspace_tokenizer.json",
      R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Whitespace"}})");
  EXPECT_THROW(Tokenizer::from_tokenizer_json(metaspace, ""), Error);
}

TEST(Loading, UnknownGgufPreTokenizerStyle) {
  try {
    tokenizer::PreTokenizer::from_gguf_style("mystery");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("mystery"), std::string::npos);
  }
}

TEST(Loading, MissingPathIsNotFound) {
  try {
    Tokenizer::load("/nonexistent/model.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
}

}  // namespace
}  // namespace optimate
