// Token ids equal Hugging Face tokenizers' on every fixture string (tests/data/tokenizer).
#include <gtest/gtest.h>

#include "fixtures.h"

namespace optimate {
namespace {

using testing::case_input;
using testing::read_fixture;

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

void expect_fixture_equal(const Tokenizer& tok, const std::string& fixture) {
  const nlohmann::json f = read_fixture(fixture);
  const bool add_special = f.at("add_special_tokens").get<bool>();
  int equal = 0, total = 0, reported = 0;
  for (const auto& c : f.at("cases")) {
    const auto expected = c.at("ids").get<std::vector<int32_t>>();
    const auto actual = tok.encode(case_input(c), add_special);
    ++total;
    if (actual == expected) {
      ++equal;
    } else if (reported++ < 10) {
      ADD_FAILURE() << fixture << ": " << c.dump() << "\n  expected " << show(expected) << "\n  actual   "
                    << show(actual);
    }
  }
  EXPECT_EQ(equal, total);
  EXPECT_GE(total, 100);
  std::printf("[ fixture  ] %s: %d/%d equal to Hugging Face\n", fixture.c_str(), equal, total);
}

TEST(EncodeReference, SmolLM2FromGgufMatchesHuggingFace) {
  auto tok = testing::smollm2();
  OPTIMATE_REQUIRE_TOKENIZER(tok);
  EXPECT_EQ(tok->kind(), "byte-level BPE");
  expect_fixture_equal(*tok, "encode_smollm2.json");
}

TEST(EncodeReference, Llama3FromTokenizerJsonMatchesHuggingFace) {
  auto tok = testing::llama3();
  OPTIMATE_REQUIRE_TOKENIZER(tok);
  expect_fixture_equal(*tok, "encode_llama3.json");
  expect_fixture_equal(*tok, "encode_llama3_no_special.json");
}

TEST(EncodeReference, SentencePieceTokenizerJsonMatchesHuggingFace) {
  auto tok = testing::spm_json();
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->kind(), "SentencePiece BPE");
  expect_fixture_equal(*tok, "encode_spm_tiny.json");
}

TEST(EncodeReference, SentencePieceGgufMatchesHuggingFace) {
  auto tok = testing::spm_gguf();
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->kind(), "SentencePiece BPE");
  expect_fixture_equal(*tok, "encode_spm_tiny.json");
}

TEST(EncodeReference, AddedTokenOptionsMatchHuggingFace) {
  // lstrip/rstrip, single_word, normalized and non-special added tokens.
  auto tok = testing::load_cached(testing::data_path("spm_tiny_added"));
  ASSERT_TRUE(tok);
  expect_fixture_equal(*tok, "encode_spm_tiny_added.json");
}

TEST(EncodeReference, SpecialTokensAndBos) {
  auto smol = testing::smollm2();
  auto llama = testing::llama3();
  OPTIMATE_REQUIRE_TOKENIZER(smol);
  OPTIMATE_REQUIRE_TOKENIZER(llama);
  EXPECT_EQ(smol->bos_id(), 1);
  EXPECT_EQ(smol->eos_id(), 2);
  EXPECT_EQ(smol->encode("<|im_start|>"), std::vector<int32_t>{1});  // no BOS for SmolLM2
  EXPECT_EQ(llama->bos_id(), 128000);
  EXPECT_EQ(llama->eos_id(), 128001);
  EXPECT_EQ(llama->encode("<|eot_id|>", false), std::vector<int32_t>{128009});
  EXPECT_EQ(llama->encode("", true), std::vector<int32_t>{128000});
  const auto stops = llama->stop_ids();
  EXPECT_NE(std::find(stops.begin(), stops.end(), 128009), stops.end());
}

}  // namespace
}  // namespace optimate
