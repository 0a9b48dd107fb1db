// Stop strings and streamed text as a client sees them, over a tokenizer whose tokens are
// multi-byte characters: the bytes held back for a stop string never split a UTF-8 character;
// a stop string completed by the last token a length limit allowed still ends the sequence as
// a stop (vLLM's order); and stop strings count only past min_tokens (vLLM's detokenizer).
#include <gtest/gtest.h>

#include <map>

#include "engine/output_processor.h"

namespace optimate {
namespace {

// Token t is kPieces[t]: ASCII, a 3-byte apostrophe, CJK, a 4-byte emoji.
const std::map<int32_t, std::string> kPieces = {
    {1, "It"}, {2, "\u2019"}, {3, "s"}, {4, " "}, {5, "\u4f60\u597d"}, {6, "\U0001F600"}, {7, "e"}, {8, "r"}};

class PieceCodec final : public TextCodec {
 public:
  std::vector<int32_t> encode(std::string_view) const override { return {}; }
  std::unique_ptr<IncrementalDecoder> make_decoder(std::span<const int32_t>, const DecodeOptions&) const override {
    struct Decoder final : IncrementalDecoder {
      std::string push(int32_t t) override { return kPieces.at(t); }
    };
    return std::make_unique<Decoder>();
  }
};

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

struct Streamed {
  std::vector<std::string> deltas;
  std::string text;
  sched::RequestOutput last;
  bool stopped_by_string = false;
};

// One token per step; the last step finished by length when `length_at_end`.
Streamed stream(const SamplingParams& params, const std::vector<int32_t>& tokens, bool length_at_end) {
  OutputProcessor p(std::make_shared<PieceCodec>());
  p.add("r", 0, std::vector<int32_t>{1}, std::make_shared<SamplingParams>(params));
  Streamed s;
  for (size_t i = 0; i < tokens.size(); ++i) {
    sched::RequestOutput out;
    out.request_id = "r";
    out.new_token_ids = {tokens[i]};
    out.usage.completion_tokens = static_cast<int64_t>(i) + 1;  // the scheduler's count
    if (length_at_end && i + 1 == tokens.size()) {
      out.finished = true;
      out.finish_reason = sched::FinishReason::kLength;
    }
    s.stopped_by_string = p.process(out);
    s.deltas.push_back(out.text);
    s.text += out.text;
    s.last = out;
    if (out.finished) break;
  }
  return s;
}

TEST(OutputProcessor, HeldBackBytesNeverSplitACharacter) {
  SamplingParams params;
  params.stop = {"zzz"};  // 2 bytes held back: inside a 3- or 4-byte character
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 4, 6, 6, 2, 3};
  const Streamed s = stream(params, tokens, true);
  std::string whole;
  for (int32_t t : tokens) whole += kPieces.at(t);
  EXPECT_EQ(s.text, whole);
  for (const std::string& d : s.deltas) EXPECT_TRUE(valid_utf8(d)) << "a delta split a character";
}

TEST(OutputProcessor, AStopStringCompletedByTheLastAllowedTokenStillStops) {
  SamplingParams params;
  params.stop = {"er"};
  const Streamed s = stream(params, {1, 4, 7, 8}, true);  // "It er": the length limit at "r"
  EXPECT_EQ(s.text, "It ");
  EXPECT_TRUE(s.last.finished);
  EXPECT_EQ(s.last.finish_reason, sched::FinishReason::kStop);
  EXPECT_EQ(std::get<std::string>(s.last.stop_reason), "er");
  EXPECT_FALSE(s.stopped_by_string);  // the scheduler had finished it already
  // Ending earlier by the string, the scheduler is told.
  const Streamed running = stream(params, {1, 4, 7, 8, 3}, false);
  EXPECT_TRUE(running.stopped_by_string);
  EXPECT_EQ(running.text, "It ");
}

// A stop string kept in the output is never retracted, so nothing is held back for it.
TEST(OutputProcessor, AKeptStopStringHoldsNothingBack) {
  SamplingParams params;
  params.stop = {"zzz"};
  params.include_stop_str_in_output = true;
  const Streamed s = stream(params, {1, 4, 7, 8}, false);
  EXPECT_EQ(s.deltas, (std::vector<std::string>{"It", " ", "e", "r"}));
}

TEST(OutputProcessor, StopStringsCountOnlyPastMinTokens) {
  SamplingParams params;
  params.stop = {"s"};
  params.min_tokens = 4;
  // "s" at token 3 is within min_tokens; the next one, at token 6, is past it.
  const Streamed s = stream(params, {1, 2, 3, 4, 1, 3, 4}, false);
  EXPECT_EQ(s.text, "It\u2019s It");
  EXPECT_TRUE(s.stopped_by_string);
}

}  // namespace
}  // namespace optimate
