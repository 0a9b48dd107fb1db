// decode() equals Hugging Face's decode with and without skip_special_tokens, and the
// incremental detokenizer streams the same text without ever splitting a UTF-8 character.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/utf8.h"

namespace optimate {
namespace {

using testing::read_fixture;

void expect_decode_equal(const std::shared_ptr<const Tokenizer>& tok, const std::string& fixture) {
  const nlohmann::json f = read_fixture(fixture);
  int equal = 0, total = 0;
  for (const auto& c : f.at("cases")) {
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    for (const bool skip : {false, true}) {
      const std::string expected = c.at(skip ? "text_skip_special" : "text").get<std::string>();
      const std::string full = tok->decode(ids, skip);
      EXPECT_EQ(full, expected) << fixture << " ids " << c.at("ids").dump() << " skip=" << skip;

      // Streamed: each delta is valid UTF-8 on its own, and they add up to the full text.
      IncrementalDetokenizer stream(tok, skip);
      std::string joined;
      for (int32_t id : ids) {
        const std::string delta = stream.push(id);
        EXPECT_TRUE(tokenizer::is_valid_utf8(delta)) << fixture << " delta splits a character";
        joined += delta;
      }
      joined += stream.finish();
      EXPECT_EQ(joined, expected) << fixture << " streamed ids " << c.at("ids").dump();
      total += 1;
      equal += full == expected && joined == expected;
    }
  }
  std::printf("[ fixture  ] %s: %d/%d decodes equal to Hugging Face (full and streamed)\n",
              fixture.c_str(), equal, total);
}

TEST(DecodeReference, SmolLM2) {
  auto tok = testing::smollm2();
  OPTIMATE_REQUIRE_TOKENIZER(tok);
  expect_decode_equal(tok, "decode_smollm2.json");
}

TEST(DecodeReference, Llama3) {
  auto tok = testing::llama3();
  OPTIMATE_REQUIRE_TOKENIZER(tok);
  expect_decode_equal(tok, "decode_llama3.json");
}

TEST(DecodeReference, SentencePiece) {
  expect_decode_equal(testing::spm_json(), "decode_spm_tiny.json");
  expect_decode_equal(testing::spm_gguf(), "decode_spm_tiny.json");
  expect_decode_equal(testing::load_cached(testing::data_path("spm_tiny_added")), "decode_spm_tiny_added.json");
}

// spaces_between_special_tokens=false: an added token right after another is its content alone
// (" zqx" becomes "zqx" after "[[x]]", not after "llo"). The deltas are what vLLM 0.26 streams:
// its rule for fast tokenizers over tokenizers' DecodeStream, for these ids of the tokenizer.
TEST(IncrementalDetokenizer, WithoutSpacesBetweenSpecialTokensAnAddedRunIsItsContents) {
  const auto tok = testing::load_cached(testing::data_path("spm_tiny_added"));
  const std::vector<int32_t> ids = {1200, 1201, 1202, 534, 609, 1202, 1200, 2};
  auto deltas = [&](bool skip, bool spaces) {
    IncrementalDetokenizer stream(tok, skip, spaces);
    std::vector<std::string> out;
    for (int32_t id : ids) out.push_back(stream.push(id));
    out.back() += stream.finish();
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(deltas(false, true), (V{"<tool>", "[[x]]", " zqx", " he", "llo", " zqx", "<tool>", "</s>"}));
  EXPECT_EQ(deltas(false, false), (V{"<tool>", "[[x]]", "zqx", " he", "llo", " zqx", "<tool>", "</s>"}));
  // Skipping special tokens, vLLM keeps the decoder's spacing whatever the other flag says.
  EXPECT_EQ(deltas(true, false), deltas(true, true));
}

TEST(IncrementalDetokenizer, HoldsBackAnIncompleteCharacter) {
  auto tok = testing::smollm2();
  OPTIMATE_REQUIRE_TOKENIZER(tok);
  // "😀" is four bytes; in a byte-level vocabulary each byte can be its own token.
  std::vector<int32_t> ids;
  // Build the per-byte token ids from the vocabulary spellings of the bytes F0 9F 98 80.
  for (const char* spelled : {"ð", "Ł", "ĺ", "Ģ"}) {
    const int32_t id = tok->token_to_id(spelled);
    ASSERT_GE(id, 0) << spelled;
    ids.push_back(id);
  }
  IncrementalDetokenizer stream(tok);
  EXPECT_EQ(stream.push(ids[0]), "");
  EXPECT_EQ(stream.push(ids[1]), "");
  EXPECT_EQ(stream.push(ids[2]), "");
  EXPECT_TRUE(stream.holding());
  EXPECT_EQ(stream.push(ids[3]), "\xF0\x9F\x98\x80");
  EXPECT_EQ(stream.finish(), "");
}

TEST(IncrementalDetokenizer, UnfinishedCharacterBecomesReplacementAtFinish) {
  auto tok = testing::smollm2();
  OPTIMATE_REQUIRE_TOKENIZER(tok);
  IncrementalDetokenizer stream(tok);
  EXPECT_EQ(stream.push(tok->token_to_id("ð")), "");
  EXPECT_EQ(stream.finish(), "\xEF\xBF\xBD");
  EXPECT_EQ(tok->decode(std::vector<int32_t>{tok->token_to_id("ð")}), "\xEF\xBF\xBD");
}

TEST(DecodeReference, RejectsIdsOutsideTheVocabulary) {
  auto tok = testing::spm_json();
  EXPECT_THROW(tok->decode(std::vector<int32_t>{tok->vocab_size()}), Error);
  EXPECT_THROW(tok->decode(std::vector<int32_t>{-1}), Error);
}

}  // namespace
}  // namespace optimate
