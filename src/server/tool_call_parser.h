// Finding tool calls in a model's output, as vLLM's tool parsers do, for a whole output or
// streamed delta by delta. tool_choice "auto" reads the chat template's own format:
//   Hermes/Qwen (ChatML templates): text, then <tool_call>{"name": ..., "arguments": {...}}
//     </tool_call> blocks (an unclosed last block counts);
//   Llama 3 JSON: an output that starts with {"name": ..., "parameters": {...}} (after an
//     optional <|python_tag|>), several calls separated by ';'.
// "required" and a named function were forced by a grammar: the output is the JSON array of
// {"name", "parameters"} objects, or the named function's arguments.
//
// Streaming sends what vLLM sends: text before any call as content; for each call a tool_calls
// delta item {"index", "id", "type": "function", "function": {"name", "arguments"}} once the
// call is complete (a named call: its header at once, then its arguments as they are
// generated). Text that turns out not to be a well-formed call is content.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/json_fields.h"
#include "server/tool_calls.h"

namespace optimate::server {

enum class ToolParser { kHermes, kLlama3Json };

struct ToolDelta {
  std::string content;
  Json tool_calls = Json::array();  // delta items, as vLLM sends them
};

class ToolCallStream {
 public:
  ToolCallStream(const ToolRequest& request, ToolParser parser);

  ToolDelta push(std::string_view text);
  ToolDelta finish();  // the output ended: flushes what was held back

  // After finish(): every call found, and the content around them.
  const std::vector<ToolCall>& calls() const { return calls_; }
  const std::string& content() const { return content_; }

 private:
  enum class Mode { kUndecided, kContent, kCalls };
  void emit_call(const Json& object, ToolDelta& out);
  void scan_hermes(ToolDelta& out, bool at_end);
  void scan_json_calls(ToolDelta& out, bool at_end);
  void give_up(ToolDelta& out);  // the held text is content after all

  const ToolRequest& request_;
  ToolParser parser_;
  Mode mode_ = Mode::kUndecided;
  std::string held_;       // text not yet sent
  std::string content_;    // all content sent
  std::vector<ToolCall> calls_;
  bool named_started_ = false;
};

struct ParsedOutput {
  std::string content;
  std::vector<ToolCall> calls;
};

// A whole output (non-streaming): the same rules as the stream.
ParsedOutput parse_tool_output(const ToolRequest& request, ToolParser parser, const std::string& text);

// Where the JSON value starting at text[pos] (an object or an array) ends: the index after its
// closing bracket, or npos while it is incomplete. Strings and escapes are skipped.
size_t json_value_end(std::string_view text, size_t pos);

}  // namespace optimate::server
