// Pre-tokenization: splits (normalized) text into the words that BPE runs on.
//
// Built from a tokenizer.json "pre_tokenizer" (Sequence / Split / Digits / ByteLevel) or from a
// GGUF tokenizer.ggml.pre style name. Each step splits every piece the previous steps produced;
// a trailing ByteLevel step re-spells each piece in GPT-2's byte alphabet.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/regex_split.h"

namespace optimate::tokenizer {

// The regexes of the styles we know, as their tokenizer.json files spell them.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

class PreTokenizer {
 public:
  PreTokenizer() = default;  // no splitting: the whole text is one word

  // From tokenizer.json's "pre_tokenizer" value (null allowed). Throws kUnsupported naming the
  // type for anything else.
  static PreTokenizer from_json(const nlohmann::json& value);
  // From GGUF tokenizer.ggml.pre ("gpt-2", "llama-bpe", "qwen2", "smollm", ...), for byte-level
  // vocabularies. Throws kUnsupported for an unknown style.
  static PreTokenizer from_gguf_style(std::string_view style);

  bool byte_level() const { return byte_level_; }

  // Appends the words of `text` to `words`.
  void split(std::string_view text, std::vector<std::string>& words) const;

 private:
  enum class Behavior { kIsolated, kRemoved };
  struct Step {
    std::shared_ptr<const RegexSplitter> regex;  // shared so PreTokenizer stays copyable
    Behavior behavior = Behavior::kIsolated;
    bool prefix_space = false;  // ByteLevel add_prefix_space: prepend ' ' to each piece
  };
  void add_json_step(const nlohmann::json& value);
  void add_regex(std::string_view pattern, Behavior behavior);

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace optimate::tokenizer
