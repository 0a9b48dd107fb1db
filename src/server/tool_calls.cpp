// tools, tool_choice and parallel_tool_calls; the grammar of a forced call.
#include "server/tool_calls.h"

#include "server/api_error.h"
#include "server/request_id.h"

namespace optimate::server {

namespace {

const char* kNamedUsage = R"(Correct usage: `{"type": "function", "function": {"name": "my_function"}}`)";

ToolFunction parse_function(const Json& tool, size_t i) {
  if (!tool.is_object()) bad_request("tools", "tools[{}] must be an object", i);
  if (auto type = get_string(tool, "type"); type && *type != "function")
    bad_request("tools", "tools[{}].type '{}' is not supported: only function tools are", i, *type);
  const Json* function = get_object(tool, "function");
  if (!function) bad_request("tools", "tools[{}].function is required", i);
  auto name = get_string(*function, "name");
  if (!name || name->empty()) bad_request("tools", "tools[{}].function.name must be a non-empty string", i);
  ToolFunction f{*name, Json::object()};
  if (auto it = function->find("parameters"); it != function->end() && !it->is_null()) {
    if (!it->is_object()) bad_request("tools", "tools[{}].function.parameters must be a JSON schema object", i);
    f.parameters = *it;
  }
  return f;
}

// The schema of one {"name", "parameters"} item of a "required" call list.
Json call_item_schema(const ToolFunction& f) {
  Json parameters = f.parameters.empty() ? Json{{"type", "object"}, {"properties", Json::object()}} : f.parameters;
  parameters.erase("$defs");
  return {{"properties", {{"name", {{"type", "string"}, {"enum", {f.name}}}}, {"parameters", parameters}}},
          {"required", {"name", "parameters"}}};
}

}  // namespace

std::string new_tool_call_id() { return random_request_id("chatcmpl-tool-"); }

ToolRequest parse_tool_request(const Json& body) {
  ToolRequest r;
  auto tools = body.find("tools");
  const bool has_tools = tools != body.end() && !tools->is_null();
  if (has_tools) {
    if (!tools->is_array()) bad_request("tools", "tools must be a list");
    for (size_t i = 0; i < tools->size(); ++i) r.functions.push_back(parse_function((*tools)[i], i));
    r.tools = *tools;
  }
  r.parallel = get_bool(body, "parallel_tool_calls").value_or(true);

  auto choice = body.find("tool_choice");
  if (choice == body.end() || choice->is_null()) {
    r.choice = has_tools && !r.functions.empty() ? ToolChoice::kAuto : ToolChoice::kNone;
    return r;
  }
  if (choice->is_string() && *choice == "none") return r;
  if (!has_tools) bad_request("tool_choice", "When using `tool_choice`, `tools` must be set.");
  if (choice->is_string()) {
    if (*choice == "auto") r.choice = ToolChoice::kAuto;
    else if (*choice == "required") r.choice = ToolChoice::kRequired;
    else
      bad_request("tool_choice", "Invalid value for `tool_choice`: {}! Only named tools, \"none\", \"auto\" or "
                  "\"required\" are supported.", choice->get<std::string>());
    // "required" with no tools behaves as "none", as OpenAI does.
    if (r.functions.empty()) r.choice = ToolChoice::kNone;
    return r;
  }
  if (!choice->is_object()) bad_request("tool_choice", "tool_choice must be a string or an object");
  const Json* function = get_object(*choice, "function");
  if (!function) bad_request("tool_choice", "Invalid value for `function` in `tool_choice`! {}", kNamedUsage);
  auto name = get_string(*function, "name");
  if (!name || name->empty()) bad_request("tool_choice", "Invalid `name` in `function` in `tool_choice`! {}", kNamedUsage);
  bool known = false;
  for (const auto& f : r.functions) known |= f.name == *name;
  if (!known) bad_request("tool_choice", "The tool specified in `tool_choice` does not match any of the specified `tools`");
  r.choice = ToolChoice::kNamed;
  r.named = *name;
  return r;
}

std::optional<structured::GrammarSpec> forced_call_grammar(const ToolRequest& r) {
  structured::GrammarSpec spec;
  spec.kind = structured::GrammarKind::kJsonSchema;
  spec.field = "tool_choice";
  if (r.choice == ToolChoice::kNamed) {
    for (const auto& f : r.functions)
      if (f.name == r.named)
        spec.text = (f.parameters.empty() ? Json{{"type", "object"}, {"properties", Json::object()}} : f.parameters).dump();
    return spec;
  }
  if (r.choice != ToolChoice::kRequired) return std::nullopt;
  Json any_of = Json::array();
  Json defs = Json::object();
  for (const auto& f : r.functions) {
    any_of.push_back(call_item_schema(f));
    if (auto d = f.parameters.find("$defs"); d != f.parameters.end() && d->is_object())
      for (const auto& [name, schema] : d->items()) {
        if (defs.contains(name) && defs[name] != schema)
          bad_request("tools", "Tool definition '{}' has multiple schemas, which is not supported.", name);
        defs[name] = schema;
      }
  }
  Json schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"type", "object"}, {"anyOf", any_of}}}};
  if (!r.parallel) schema["maxItems"] = 1;
  if (!defs.empty()) schema["$defs"] = defs;
  spec.text = schema.dump();
  return spec;
}

}  // namespace optimate::server
