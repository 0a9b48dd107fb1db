#include "tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace optimate::tokenizer {

using nlohmann::json;

void PreTokenizer::add_regex(std::string_view pattern, Behavior behavior) {
  steps_.push_back({std::make_shared<const RegexSplitter>(pattern), behavior, false});
}

PreTokenizer PreTokenizer::from_json(const json& value) {
  PreTokenizer p;
  if (!value.is_null()) p.add_json_step(value);
  return p;
}

void PreTokenizer::add_json_step(const json& v) {
  const std::string type = v.value("type", "");
  if (byte_level_)
    fail(ErrorCode::kUnsupported, "pre_tokenizer: a {} step after ByteLevel is not supported", type);
  if (type == "Sequence") {
    for (const json& step : v.at("pretokenizers")) add_json_step(step);
  } else if (type == "ByteLevel") {
    if (v.value("add_prefix_space", false)) steps_.push_back({nullptr, Behavior::kIsolated, true});
    if (v.value("use_regex", true)) add_regex(kGpt2Pattern, Behavior::kIsolated);
    byte_level_ = true;
  } else if (type == "Digits") {
    add_regex(v.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)", Behavior::kIsolated);
  } else if (type == "Split") {
    const json& pattern = v.at("pattern");
    std::string regex;
    if (pattern.contains("Regex")) {
      regex = pattern.at("Regex").get<std::string>();
    } else {
      // A literal string: quote it so PCRE2 matches it verbatim.
      regex = "\\Q" + pattern.at("String").get<std::string>() + "\\E";
    }
    if (v.value("invert", false))
      fail(ErrorCode::kUnsupported, "pre_tokenizer Split with invert=true is not supported");
    const std::string behavior = v.value("behavior", "");
    if (behavior == "Isolated") {
      add_regex(regex, Behavior::kIsolated);
    } else if (behavior == "Removed") {
      add_regex(regex, Behavior::kRemoved);
    } else {
      fail(ErrorCode::kUnsupported, "pre_tokenizer Split behavior {:?} is not supported", behavior);
    }
  } else {
    fail(ErrorCode::kUnsupported, "pre_tokenizer type {:?} is not supported", type);
  }
}

PreTokenizer PreTokenizer::from_gguf_style(std::string_view style) {
  PreTokenizer p;
  if (style == "gpt-2" || style == "phi-2") {
    p.add_regex(kGpt2Pattern, Behavior::kIsolated);
  } else if (style == "llama-bpe" || style == "llama3" || style == "llama-v3") {
    p.add_regex(kLlama3Pattern, Behavior::kIsolated);
  } else if (style == "qwen2" || style == "deepseek-r1-qwen") {
    p.add_regex(kQwen2Pattern, Behavior::kIsolated);
  } else if (style == "smollm") {
    p.add_regex(R"(\p{N})", Behavior::kIsolated);
    p.add_regex(kGpt2Pattern, Behavior::kIsolated);
  } else {
    fail(ErrorCode::kUnsupported,
         "tokenizer.ggml.pre {:?} is not a known pre-tokenizer style (known: gpt-2, phi-2, "
         "llama-bpe, llama3, llama-v3, qwen2, deepseek-r1-qwen, smollm)",
         style);
  }
  p.byte_level_ = true;
  return p;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string>& words) const {
  std::vector<std::string> pieces{std::string(text)};
  std::vector<std::string> next;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string& piece : pieces) {
      if (step.prefix_space) {
        if (piece.empty() || piece[0] != ' ') piece.insert(piece.begin(), ' ');
        next.push_back(std::move(piece));
        continue;
      }
      for (const Span& s : step.regex->split(piece)) {
        if (s.matched && step.behavior == Behavior::kRemoved) continue;
        next.emplace_back(piece.substr(s.begin, s.end - s.begin));
      }
    }
    pieces.swap(next);
  }
  for (std::string& piece : pieces) {
    if (piece.empty()) continue;
    words.push_back(byte_level_ ? bytes_to_byte_level(piece) : std::move(piece));
  }
}

}  // namespace optimate::tokenizer
