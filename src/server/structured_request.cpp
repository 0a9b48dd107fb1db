// response_format, structured_outputs and vLLM's guided_* fields -> one GrammarSpec.
#include <vector>

#include "server/api_error.h"
#include "server/client_json.h"
#include "server/openai_request.h"

namespace optimate::server {

namespace {

using structured::GrammarKind;
using structured::GrammarSpec;

// A schema given as an object or as JSON text (parsed with the bounds of a body, so the text
// the grammar engine gets is what was checked).
std::string schema_text(const Json& v, const char* field) {
  if (v.is_object()) return v.dump();
  if (v.is_string()) {
    const Json parsed = parse_field_json(v.get_ref<const std::string&>(), field);
    if (!parsed.is_object()) bad_request(field, "{} must be a JSON schema (an object, or its JSON text)", field);
    return parsed.dump();
  }
  bad_request(field, "{} must be a JSON schema (an object, or its JSON text)", field);
}

std::vector<std::string> choices(const Json& v, const char* field) {
  if (!v.is_array() || v.empty()) bad_request(field, "{} must be a non-empty list of strings", field);
  std::vector<std::string> out;
  for (const auto& c : v) {
    if (!c.is_string()) bad_request(field, "{} must be a non-empty list of strings", field);
    out.push_back(c.get<std::string>());
  }
  return out;
}

// A grammar in xgrammar's EBNF ("root ::= ...") or, without any "::=", Lark (vLLM's rule).
GrammarSpec grammar(const Json& v, const char* field) {
  if (!v.is_string() || v.get<std::string>().empty()) bad_request(field, "{} must be a non-empty grammar string", field);
  const std::string text = v.get<std::string>();
  return {text.find("::=") != std::string::npos ? GrammarKind::kEbnf : GrammarKind::kLark, text, {}, true, field};
}

// vLLM's structural tag: xgrammar's form ({"type": "structural_tag", "format": ...}) as is, or
// the older {"structures": [{"begin", "schema", "end"}], "triggers": [...]} converted to it.
std::string structural_tag(const Json& v, const char* field) {
  Json tag = v.is_string() ? parse_field_json(v.get_ref<const std::string&>(), field) : v;
  if (!tag.is_object()) bad_request(field, "{} must be a structural tag object", field);
  if (tag.contains("format")) return tag.dump();
  const Json* structures = tag.contains("structures") ? &tag["structures"] : nullptr;
  const Json* triggers = tag.contains("triggers") ? &tag["triggers"] : nullptr;
  if (!structures || !structures->is_array() || !triggers || !triggers->is_array())
    bad_request(field, "{} needs `format`, or `structures` and `triggers`", field);
  Json tags = Json::array();
  for (const auto& s : *structures) {
    if (!s.is_object() || !s.contains("begin") || !s.contains("end"))
      bad_request(field, "{}: every structure needs `begin`, `schema` and `end`", field);
    Json schema = s.contains("schema") && s["schema"].is_object() ? s["schema"] : Json::object();
    tags.push_back({{"type", "tag"},
                    {"begin", s["begin"]},
                    {"content", {{"type", "json_schema"}, {"json_schema", schema}}},
                    {"end", s["end"]}});
  }
  return Json{{"type", "structural_tag"}, {"format", {{"type", "triggered_tags"}, {"triggers", *triggers}, {"tags", tags}}}}
      .dump();
}

void add(std::vector<GrammarSpec>& found, GrammarSpec spec) { found.push_back(std::move(spec)); }

}  // namespace

std::optional<GrammarSpec> parse_structured_outputs(const Json& body) {
  std::vector<GrammarSpec> found;
  bool any_whitespace = true;

  if (const Json* format = get_object(body, "response_format")) {
    auto type = get_string(*format, "type");
    if (!type) bad_request("response_format", "response_format.type is required");
    if (*type == "json_object") {
      add(found, {GrammarKind::kJsonObject, "", {}, true, "response_format"});
    } else if (*type == "json_schema") {
      const Json* js = get_object(*format, "json_schema");
      if (!js || !js->contains("schema"))
        bad_request("response_format", "When response_format type is 'json_schema', the 'json_schema' field must "
                    "be provided with its 'schema'.");
      add(found, {GrammarKind::kJsonSchema, schema_text((*js)["schema"], "response_format"), {}, true, "response_format"});
    } else if (*type == "structural_tag") {
      add(found, {GrammarKind::kStructuralTag, structural_tag(*format, "response_format"), {}, true, "response_format"});
    } else if (*type != "text") {
      bad_request("response_format", "response_format type must be 'text', 'json_object', 'json_schema' or "
                  "'structural_tag', got '{}'", *type);
    }
  }

  if (const Json* so = get_object(body, "structured_outputs")) {
    if (auto v = so->find("json"); v != so->end() && !v->is_null())
      add(found,
          {GrammarKind::kJsonSchema, schema_text(*v, "structured_outputs.json"), {}, true, "structured_outputs.json"});
    if (auto v = get_string(*so, "regex")) add(found, {GrammarKind::kRegex, *v, {}, true, "structured_outputs.regex"});
    if (auto v = so->find("choice"); v != so->end() && !v->is_null())
      add(found,
          {GrammarKind::kChoice, "", choices(*v, "structured_outputs.choice"), true, "structured_outputs.choice"});
    if (auto v = so->find("grammar"); v != so->end() && !v->is_null())
      add(found, grammar(*v, "structured_outputs.grammar"));
    if (get_bool(*so, "json_object").value_or(false))
      add(found, {GrammarKind::kJsonObject, "", {}, true, "structured_outputs.json_object"});
    if (auto v = so->find("structural_tag"); v != so->end() && !v->is_null())
      add(found, {GrammarKind::kStructuralTag, structural_tag(*v, "structured_outputs.structural_tag"), {}, true,
                  "structured_outputs.structural_tag"});
    if (get_bool(*so, "disable_any_whitespace").value_or(false)) any_whitespace = false;
    // whitespace_pattern is an outlines option: vLLM's xgrammar backend ignores it, and so does this.
  }

  if (auto v = body.find("guided_json"); v != body.end() && !v->is_null())
    add(found, {GrammarKind::kJsonSchema, schema_text(*v, "guided_json"), {}, true, "guided_json"});
  if (auto v = get_string(body, "guided_regex")) add(found, {GrammarKind::kRegex, *v, {}, true, "guided_regex"});
  if (auto v = body.find("guided_choice"); v != body.end() && !v->is_null())
    add(found, {GrammarKind::kChoice, "", choices(*v, "guided_choice"), true, "guided_choice"});
  if (auto v = body.find("guided_grammar"); v != body.end() && !v->is_null()) add(found, grammar(*v, "guided_grammar"));
  if (auto v = body.find("structural_tag"); v != body.end() && !v->is_null())
    add(found, {GrammarKind::kStructuralTag, structural_tag(*v, "structural_tag"), {}, true, "structural_tag"});
  if (auto backend = get_string(body, "guided_decoding_backend");
      backend && *backend != "xgrammar" && *backend != "auto")
    bad_request("guided_decoding_backend", "guided_decoding_backend '{}' is not available: the grammar engine is "
                "xgrammar", *backend);

  if (found.empty()) return std::nullopt;
  if (found.size() > 1)
    bad_request(found[1].field, "You can only use one kind of structured output constraint; this request sets "
                "{} and {}", found[0].field, found[1].field);
  found[0].any_whitespace = any_whitespace;
  return found[0];
}

}  // namespace optimate::server
