// Token strings back to text, one token at a time, matching Hugging Face's decoders:
//   ByteLevel: each token's characters map back to bytes; the byte stream is decoded as lossy
//     UTF-8 (an added token spelled outside the byte alphabet contributes its own UTF-8).
//   SentencePiece (Replace "▁"->" ", ByteFallback, Fuse, Strip): "▁" becomes ' ', each run of
//     <0xNN> tokens becomes its bytes when they are valid UTF-8 and one U+FFFD per byte
//     otherwise, and the first `strip_leading_spaces` leading spaces of the text are dropped.
// The same stream serves full decoding and incremental detokenization, so the two agree.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/utf8.h"

namespace optimate::tokenizer {

struct DecoderSpec {
  enum class Kind { kByteLevel, kSentencePiece };
  Kind kind = Kind::kByteLevel;
  bool byte_fallback = false;
  int strip_leading_spaces = 0;

  // From tokenizer.json "decoder"; throws kUnsupported naming anything else.
  static DecoderSpec from_json(const nlohmann::json& value);
};

class DecodeStream {
 public:
  explicit DecodeStream(const DecoderSpec& spec) : spec_(spec) {}

  // Feeds one token's vocabulary string; appends the text that is now final to `out`.
  void push(std::string_view token, std::string& out);
  // Appends whatever is still held back (an incomplete character, a byte run).
  void finish(std::string& out);
  // True when text is held back waiting for more tokens.
  bool holding() const { return utf8_.has_pending() || !byte_run_.empty(); }

 private:
  void emit(std::string_view text, std::string& out);
  void flush_byte_run(std::string& out);

  DecoderSpec spec_;
  Utf8Stream utf8_;
  std::string byte_run_;
  int chars_seen_ = 0;  // output characters so far, up to strip_leading_spaces
};

// The byte a SentencePiece byte token "<0xNN>" stands for, or -1.
int byte_token_value(std::string_view token);

}  // namespace optimate::tokenizer
