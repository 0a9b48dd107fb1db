// Tool calling in /v1/chat/completions: the request's tools and tool_choice, and the grammar
// that forces a call (tool_choice "required" or a named function, as vLLM builds it). The
// calls are read back from the output by tool_call_parser.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/json_fields.h"
#include "structured/grammar_spec.h"

namespace optimate::server {

struct ToolFunction {
  std::string name;
  Json parameters;  // a JSON schema; an empty object when the tool takes none
};

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ToolRequest {
  Json tools = nullptr;  // the request's `tools` as sent (the chat template shows them)
  std::vector<ToolFunction> functions;
  ToolChoice choice = ToolChoice::kNone;
  std::string named;  // kNamed: the function to call
  bool parallel = true;  // parallel_tool_calls: false keeps the first call only
};

// tools, tool_choice and parallel_tool_calls, checked as vLLM checks them (400 naming the field).
ToolRequest parse_tool_request(const Json& body);

// The grammar of a forced call: the named function's arguments, or for "required" a non-empty
// JSON array of {"name", "parameters"} objects, one schema per tool. nullopt for none/auto.
std::optional<structured::GrammarSpec> forced_call_grammar(const ToolRequest& request);

struct ToolCall {
  std::string id;         // "chatcmpl-tool-" + 32 hex digits
  std::string name;
  std::string arguments;  // JSON text
};

// The id of a new call.
std::string new_tool_call_id();

}  // namespace optimate::server
