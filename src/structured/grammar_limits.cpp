#include "structured/grammar_limits.h"

#include <algorithm>
#include <array>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace optimate::structured {

namespace {

// Plain json (a sorted map): checks need no member order, and its parser is linear-logarithmic
// where ordered_json's is quadratic in the keys of an object.
using Json = nlohmann::json;

constexpr std::array<std::string_view, 14> kBuiltinFormats = {
    "email", "date", "time", "date-time", "duration", "ipv4", "ipv6", "hostname", "uuid", "uri",
    "uri-reference", "uri-template", "json-pointer", "relative-json-pointer"};

// Keywords xgrammar compiles without: the output would not be held to them.
constexpr std::array<std::string_view, 12> kIgnoredKeywords = {
    "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies",
    "$dynamicRef", "$recursiveRef", "contains", "minContains", "maxContains"};

// Members whose value is one schema, an array of schemas, or a map of name -> schema.
constexpr std::array<std::string_view, 5> kSchemaKeys = {
    "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "propertyNames", "additionalItems"};
constexpr std::array<std::string_view, 3> kSchemaListKeys = {"anyOf", "oneOf", "prefixItems"};
constexpr std::array<std::string_view, 4> kSchemaMapKeys = {"properties", "patternProperties", "$defs",
                                                            "definitions"};

constexpr int64_t kIntegerMultipleOfMax = 1024;
constexpr int64_t kIntegerMultipleOfRangeMax = 10000;

template <size_t N>
bool in(const std::array<std::string_view, N>& list, std::string_view key) {
  return std::find(list.begin(), list.end(), key) != list.end();
}

// Throws past the depth bound; recursion stops one level past it, so a value of any depth is
// safe to check.
void check_depth(const Json& value, int depth, const std::string& field) {
  if (!value.is_structured()) return;
  if (depth > GrammarLimits::kMaxSchemaDepth)
    fail(ErrorCode::kInvalidArgument, "{}: the schema nests arrays and objects deeper than {} levels", field,
         GrammarLimits::kMaxSchemaDepth);
  for (const auto& item : value) check_depth(item, depth + 1, field);
}

class SchemaChecker {
 public:
  explicit SchemaChecker(const std::string& field) : field_(field) {}

  void check(const Json& schema) {
    if (!schema.is_object()) return;  // true/false, or what xgrammar itself refuses
    for (const auto& [key, value] : schema.items()) {
      if (in(kIgnoredKeywords, key)) refuse(key, "is not enforced by the grammar engine");
      if (key == "uniqueItems" && value != Json(false)) refuse(key, "is not enforced by the grammar engine");
    }
    check_ref(schema);
    check_string(schema);
    check_multiple_of(schema);
    check_counts(schema);
    for (const auto& [key, value] : schema.items()) {
      path_.push_back(key);
      if (in(kSchemaKeys, key)) {
        check(value);
      } else if (key == "items") {
        if (value.is_array()) each(value);
        else check(value);
      } else if (key == "allOf") {
        if (value.is_array() && value.size() > 1)
          refuse(key, "with more than one schema is not enforced by the grammar engine (merge them into one)");
        each(value);
      } else if (in(kSchemaListKeys, key)) {
        each(value);
      } else if (in(kSchemaMapKeys, key) && value.is_object()) {
        for (const auto& [name, sub] : value.items()) {
          path_.push_back(name);
          check(sub);
          path_.pop_back();
        }
      }
      path_.pop_back();
    }
  }

 private:
  void each(const Json& list) {
    if (!list.is_array()) return;
    for (size_t i = 0; i < list.size(); ++i) {
      path_.push_back(std::to_string(i));
      check(list[i]);
      path_.pop_back();
    }
  }

  [[noreturn]] void refuse(std::string_view keyword, std::string_view why) {
    std::string at;
    for (const auto& p : path_) at += "/" + p.substr(0, 64);
    if (at.size() > 200) at = "..." + at.substr(at.size() - 200);
    fail(ErrorCode::kInvalidArgument, "{}: the schema's `{}`{} {}", field_, keyword,
         at.empty() ? "" : " (at " + at + ")", why);
  }

  void check_ref(const Json& schema) {
    auto it = schema.find("$ref");
    if (it == schema.end() || !it->is_string()) return;
    const std::string& ref = it->get_ref<const std::string&>();
    if (ref != "#" && !ref.starts_with("#/"))
      refuse("$ref", "must point inside the schema (\"#\" or \"#/...\"): other documents are not fetched");
  }

  void check_string(const Json& schema) {
    auto format = schema.find("format");
    const bool has_length = schema.contains("minLength") || schema.contains("maxLength");
    if (format != schema.end()) {
      if (!format->is_string()) refuse("format", "must be a string");
      if (!is_builtin_format(format->get_ref<const std::string&>()))
        refuse("format", "'" + format->get<std::string>().substr(0, 64) +
                             "' is not enforced by the grammar engine; it enforces " + formats());
      if (has_length) refuse("format", "with minLength/maxLength: the lengths would not be enforced");
    }
    if (schema.contains("pattern") && has_length)
      refuse("pattern", "with minLength/maxLength: the lengths would not be enforced");
  }

  void check_multiple_of(const Json& schema) {
    auto it = schema.find("multipleOf");
    if (it == schema.end()) return;
    auto type = schema.find("type");
    const bool integer = type != schema.end() && *type == "integer";
    if (!integer) refuse("multipleOf", "is enforced on integers only");
    if (!it->is_number() || it->get<double>() != static_cast<double>(static_cast<int64_t>(it->get<double>())) ||
        it->get<double>() < 1 || it->get<double>() > static_cast<double>(kIntegerMultipleOfMax))
      refuse("multipleOf", "must be a whole number from 1 to 1024 to be enforced");
    const bool low = schema.contains("minimum") || schema.contains("exclusiveMinimum");
    const bool high = schema.contains("maximum") || schema.contains("exclusiveMaximum");
    if (low != high) refuse("multipleOf", "with a one-sided range is not enforced");
    if (low && high) {
      auto bound = [&](const char* a, const char* b) {
        auto v = schema.find(a);
        if (v == schema.end()) v = schema.find(b);
        return v->is_number() ? v->get<double>() : 0.0;
      };
      if (bound("maximum", "exclusiveMaximum") - bound("minimum", "exclusiveMinimum") > kIntegerMultipleOfRangeMax)
        refuse("multipleOf", "with a range wider than 10000 is not enforced");
    }
  }

  void check_counts(const Json& schema) {
    if (auto e = schema.find("enum"); e != schema.end() && e->is_array() && e->size() > GrammarLimits::kMaxEnumValues)
      refuse("enum", "has more than " + std::to_string(GrammarLimits::kMaxEnumValues) + " values");
    if (auto p = schema.find("properties");
        p != schema.end() && p->is_object() && p->size() > GrammarLimits::kMaxProperties)
      refuse("properties", "has more than " + std::to_string(GrammarLimits::kMaxProperties) + " properties");
    for (const char* key : {"anyOf", "oneOf"})
      if (auto a = schema.find(key); a != schema.end() && a->is_array() && a->size() > GrammarLimits::kMaxAlternatives)
        refuse(key, "has more than " + std::to_string(GrammarLimits::kMaxAlternatives) + " schemas");
  }

  static std::string formats() {
    std::string out;
    for (std::string_view f : kBuiltinFormats) out += (out.empty() ? "" : ", ") + std::string(f);
    return out;
  }

  const std::string& field_;
  std::vector<std::string> path_;
};

Json parse(const std::string& text, const GrammarSpec& spec) {
  Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded())
    fail(ErrorCode::kInvalidArgument, "{}: the {} is not valid JSON", spec.field, grammar_kind_name(spec.kind));
  check_depth(parsed, 1, spec.field);
  return parsed;
}

// Every JSON schema inside a structural tag (its "json_schema" members, at any depth).
void check_tag_schemas(const Json& value, const std::string& field) {
  if (value.is_object()) {
    for (const auto& [key, item] : value.items()) {
      if (key == "json_schema" && item.is_object()) SchemaChecker(field).check(item);
      else check_tag_schemas(item, field);
    }
  } else if (value.is_array()) {
    for (const auto& item : value) check_tag_schemas(item, field);
  }
}

void check_bytes(size_t bytes, size_t limit, const GrammarSpec& spec) {
  if (bytes > limit)
    fail(ErrorCode::kInvalidArgument, "{}: the {} is {} bytes, more than the {} allowed", spec.field,
         grammar_kind_name(spec.kind), bytes, limit);
}

}  // namespace

bool is_builtin_format(const std::string& format) { return in(kBuiltinFormats, format); }

void check_grammar_limits(const GrammarSpec& spec) {
  switch (spec.kind) {
    case GrammarKind::kJsonObject: return;
    case GrammarKind::kJsonSchema: {
      check_bytes(spec.text.size(), GrammarLimits::kMaxSchemaBytes, spec);
      SchemaChecker(spec.field).check(parse(spec.text, spec));
      return;
    }
    case GrammarKind::kStructuralTag: {
      check_bytes(spec.text.size(), GrammarLimits::kMaxSchemaBytes, spec);
      check_tag_schemas(parse(spec.text, spec), spec.field);
      return;
    }
    case GrammarKind::kRegex:
    case GrammarKind::kEbnf:
    case GrammarKind::kLark: check_bytes(spec.text.size(), GrammarLimits::kMaxGrammarBytes, spec); return;
    case GrammarKind::kChoice: {
      if (spec.choices.size() > GrammarLimits::kMaxEnumValues)
        fail(ErrorCode::kInvalidArgument, "{}: {} choices, more than the {} allowed", spec.field, spec.choices.size(),
             GrammarLimits::kMaxEnumValues);
      size_t bytes = 0;
      for (const auto& c : spec.choices) bytes += c.size();
      check_bytes(bytes, GrammarLimits::kMaxSchemaBytes, spec);
      return;
    }
  }
}

}  // namespace optimate::structured
