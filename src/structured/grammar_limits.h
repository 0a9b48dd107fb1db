// What a grammar must meet before the grammar engine compiles it: bounds on its size and
// shape, and, for JSON schemas, only keywords the engine enforces.
//
// Compile time grows steeply with some shapes (benchmarks/grammar_compile_bench.cpp, figures
// in docs/openai-compatibility.md): objects nested 128 deep take about a second and 256 deep
// six; an enum of 8,000 values 0.15 s and of 12,000 ten; an object of 4,000 properties two
// and a half. The bounds sit well below each cliff, so a grammar within them compiles in
// well under a second on one core.
//
// xgrammar silently drops some JSON-schema keywords (it logs a warning and compiles without
// them), so the output would not match the schema a client sent. Those are refused here with
// the keyword named: `not`, `if`/`then`/`else`, `dependentRequired`, `dependentSchemas`,
// `dependencies`, `$dynamicRef`, `$recursiveRef`, `uniqueItems: true`, `contains`,
// `minContains`, `maxContains`, a `$ref` outside the document (anything but "#" or "#/..."),
// `allOf` with more than one schema, a `format` xgrammar has no pattern for, `minLength` or
// `maxLength` beside `pattern` or a built-in `format`, and the `multipleOf` forms xgrammar
// ignores (on numbers; a non-integer or one above 1024 on integers; on integers with a range
// that is one-sided or wider than 10,000).
#pragma once

#include <cstddef>

#include "structured/grammar_spec.h"

namespace optimate::structured {

struct GrammarLimits {
  static constexpr size_t kMaxSchemaBytes = size_t{256} << 10;   // a schema or structural tag
  static constexpr int kMaxSchemaDepth = 64;                     // arrays and objects nested
  static constexpr size_t kMaxEnumValues = 4096;                 // one enum, or the choices
  static constexpr size_t kMaxProperties = 1024;                 // one object schema
  static constexpr size_t kMaxAlternatives = 1024;               // one anyOf / oneOf
  static constexpr size_t kMaxGrammarBytes = size_t{64} << 10;   // a regex, EBNF or Lark text
};

// The formats xgrammar compiles to a pattern.
bool is_builtin_format(const std::string& format);

// Throws Error(kInvalidArgument) "FIELD: what is wrong" (spec.field) when the grammar passes
// a bound or uses a keyword the engine would not enforce.
void check_grammar_limits(const GrammarSpec& spec);

}  // namespace optimate::structured
