// What a request asked its output to follow, as plain data: the server parses OpenAI's
// response_format, vLLM's structured_outputs and guided_* fields and tool_choice into one of
// these; GrammarCompiler turns it into a TokenConstraint.
#pragma once

#include <string>
#include <vector>

namespace optimate::structured {

enum class GrammarKind {
  kJsonSchema,     // text: a JSON schema
  kJsonObject,     // any JSON object (response_format json_object)
  kRegex,          // text: a regular expression the whole output matches
  kChoice,         // choices: the output is exactly one of them
  kEbnf,           // text: a grammar in xgrammar's EBNF (GBNF-like), root rule "root"
  kLark,           // text: a Lark grammar, root rule "start"
  kStructuralTag,  // text: xgrammar's structural tag JSON (vLLM's structural_tag)
};

struct GrammarSpec {
  GrammarKind kind = GrammarKind::kJsonObject;
  std::string text;
  std::vector<std::string> choices;
  // JSON: whitespace between tokens is free, up to kMaxJsonWhitespace characters in a row
  // (vLLM's default); false: the compact separators "," and ":" with one space after each.
  bool any_whitespace = true;
  std::string field;  // the request field it came from: errors name it
};

// The longest whitespace run JSON grammars allow: without a bound a small model may emit
// newlines until max_tokens and never close the object.
inline constexpr int kMaxJsonWhitespace = 4;

const char* grammar_kind_name(GrammarKind kind);

}  // namespace optimate::structured
