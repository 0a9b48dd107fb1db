// What a grammar must meet before it is compiled: JSON-schema keywords the grammar engine
// would silently drop are refused by name (each would let output through that breaks the
// client's schema), and size and shape bounds hold; what the engine enforces passes.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "structured/grammar_limits.h"

namespace optimate::structured {
namespace {

// check_grammar_limits' message for a schema ("" when it passes).
std::string refusal(const std::string& schema, GrammarKind kind = GrammarKind::kJsonSchema) {
  try {
    check_grammar_limits({kind, schema, {}, true, "response_format"});
    return "";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
}

TEST(GrammarLimits, KeywordsTheEngineWouldDropAreRefusedByName) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type": "object", "properties": {"a": {"not": {"type": "string"}}}})", "`not` (at /properties/a)"},
      {R"({"$ref": "http://example.com/schema.json"})", "`$ref`"},
      {R"({"$ref": "file:///etc/passwd"})", "`$ref`"},
      {R"({"allOf": [{"type": "string"}, {"type": "integer"}]})", "`allOf`"},
      {R"({"type": "string", "format": "credit-card"})", "`format`"},
      {R"({"type": "string", "format": "email", "maxLength": 10})", "`format`"},
      {R"({"type": "string", "pattern": "a+", "minLength": 2})", "`pattern`"},
      {R"({"if": {"type": "string"}, "then": {"minLength": 1}})", "`if`"},
      {R"({"type": "object", "dependentRequired": {"a": ["b"]}})", "`dependentRequired`"},
      {R"({"type": "array", "uniqueItems": true})", "`uniqueItems`"},
      {R"({"type": "array", "contains": {"type": "integer"}})", "`contains`"},
      {R"({"type": "number", "multipleOf": 0.5})", "`multipleOf`"},
      {R"({"type": "integer", "multipleOf": 3, "minimum": 0})", "`multipleOf`"},
      {R"({"anyOf": [{"type": "object", "properties": {"x": {"$dynamicRef": "#a"}}}]})", "`$dynamicRef` (at /anyOf/0/properties/x)"},
      {R"({"$defs": {"d": {"not": {}}}, "$ref": "#/$defs/d"})", "`not` (at /$defs/d)"},
  };
  for (const auto& [schema, named] : cases) {
    const std::string message = refusal(schema);
    EXPECT_NE(message.find("response_format: the schema's "), std::string::npos) << schema << ": " << message;
    EXPECT_NE(message.find(named), std::string::npos) << schema << ": " << message;
  }
}

TEST(GrammarLimits, WhatTheEngineEnforcesPasses) {
  for (const char* schema : {
           R"({"type": "object", "properties": {"d": {"type": "string", "format": "date-time"}}, "required": ["d"]})",
           R"({"$defs": {"p": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/$defs/p"}})",
           R"({"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}}]})",
           R"({"type": "object", "patternProperties": {"^x_": {"type": "integer"}}, "additionalProperties": false})",
           R"({"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 100})",
           R"({"type": "array", "uniqueItems": false, "minItems": 1})",
           R"({"type": "string", "minLength": 2, "maxLength": 5})",
           R"({"enum": [{"not": 1}, "format"], "default": {"if": true}})",  // data, not keywords
       })
    EXPECT_EQ(refusal(schema), "") << schema;
}

TEST(GrammarLimits, SizeAndShapeBounds) {
  auto nested = [](int depth) {
    std::string s = R"({"type": "integer"})";
    for (int i = 1; i < depth; ++i) s = "[" + s + "]";
    return R"({"enum": [)" + s + "]}";
  };
  // The enum's list and the schema object count: 2 levels around the nesting.
  EXPECT_EQ(refusal(nested(GrammarLimits::kMaxSchemaDepth - 2)), "");
  EXPECT_NE(refusal(nested(GrammarLimits::kMaxSchemaDepth)).find("deeper than 64 levels"), std::string::npos);
  // A depth far past the bound is refused without a deep recursion.
  EXPECT_NE(refusal(std::string(100'000, '[') + std::string(100'000, ']')).find("deeper"), std::string::npos);

  auto list = [](const char* key, size_t n, const std::string& item) {
    std::string s = std::string("{\"") + key + "\": [";
    for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + item;
    return s + "]}";
  };
  EXPECT_EQ(refusal(list("enum", GrammarLimits::kMaxEnumValues, "1")), "");
  EXPECT_NE(refusal(list("enum", GrammarLimits::kMaxEnumValues + 1, "1")).find("`enum`"), std::string::npos);
  EXPECT_NE(refusal(list("anyOf", GrammarLimits::kMaxAlternatives + 1, "{}")).find("`anyOf`"), std::string::npos);
  std::string properties = R"({"type": "object", "properties": {)";
  for (size_t i = 0; i <= GrammarLimits::kMaxProperties; ++i) properties += (i ? ", \"p" : "\"p") + std::to_string(i) + "\": {}";
  EXPECT_NE(refusal(properties + "}}").find("`properties`"), std::string::npos);
  EXPECT_NE(refusal("{\"description\": \"" + std::string(GrammarLimits::kMaxSchemaBytes, 'x') + "\"}").find("bytes"),
            std::string::npos);
  EXPECT_NE(refusal(std::string(GrammarLimits::kMaxGrammarBytes + 1, 'a'), GrammarKind::kRegex).find("bytes"),
            std::string::npos);
  GrammarSpec choices{GrammarKind::kChoice, "", std::vector<std::string>(GrammarLimits::kMaxEnumValues + 1, "x"), true,
                      "guided_choice"};
  EXPECT_THROW(check_grammar_limits(choices), Error);
  // A structural tag's schemas are held to the same rules.
  EXPECT_NE(refusal(R"({"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<f>"], "tags": [
                      {"type": "tag", "begin": "<f>", "end": "</f>",
                       "content": {"type": "json_schema", "json_schema": {"not": {}}}}]}})",
                    GrammarKind::kStructuralTag)
                .find("`not`"),
            std::string::npos);
}

}  // namespace
}  // namespace optimate::structured
