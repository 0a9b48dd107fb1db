// Text normalization applied to each piece between added tokens (SentencePiece-style
// vocabularies: prepend "▁", spaces to "▁"). Built from tokenizer.json "normalizer" or from
// GGUF SentencePiece settings.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace optimate::tokenizer {

inline constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 "▁"

class Normalizer {
 public:
  Normalizer() = default;  // identity
  // Throws kUnsupported naming the type for anything but null, Sequence, Prepend and
  // string-pattern Replace.
  static Normalizer from_json(const nlohmann::json& value);
  // SentencePiece: optional "▁" prefix (the dummy prefix), then every ' ' becomes "▁".
  static Normalizer sentencepiece(bool add_dummy_prefix);

  std::string apply(std::string_view text) const;

 private:
  struct Op {
    bool prepend;         // true: prepend `to` to non-empty text; false: replace `from` by `to`
    std::string from, to;
  };
  void add_json(const nlohmann::json& value);
  std::vector<Op> ops_;
};

}  // namespace optimate::tokenizer
