#include "server/tool_call_parser.h"

#include <algorithm>

#include "server/client_json.h"
#include "tokenizer/python_json.h"

namespace optimate::server {

namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

bool blank(std::string_view s) { return std::all_of(s.begin(), s.end(), is_space); }

// The longest suffix of `text` that begins `marker`: text that may yet become the marker.
size_t partial_marker(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace

size_t json_value_end(std::string_view text, size_t pos) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = pos; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

ToolCallStream::ToolCallStream(const ToolRequest& request, ToolParser parser) : request_(request), parser_(parser) {
  if (request.choice == ToolChoice::kRequired) mode_ = Mode::kCalls;
}

void ToolCallStream::emit_call(const Json& object, ToolDelta& out) {
  if (!request_.parallel && !calls_.empty()) return;  // parallel_tool_calls=false: the first only
  const Json* args = nullptr;
  for (const char* key : {"arguments", "parameters"})
    if (auto it = object.find(key); it != object.end()) {
      args = &*it;
      break;
    }
  // Arguments a model wrote as a string of JSON pass as they are; any other string is itself
  // the value (as vLLM's json.dumps gives it), so that the client always gets JSON text.
  const bool json_text = args && args->is_string() && Json::accept(args->get<std::string>());
  ToolCall call{new_tool_call_id(), object["name"].get<std::string>(),
                !args ? "{}" : json_text ? args->get<std::string>() : python_json(*args)};
  out.tool_calls.push_back({{"index", calls_.size()},
                            {"id", call.id},
                            {"type", "function"},
                            {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  calls_.push_back(std::move(call));
}

void ToolCallStream::give_up(ToolDelta& out) {
  out.content += held_;
  content_ += held_;
  held_.clear();
  mode_ = Mode::kContent;
}

// One {"name": ..., ...} object: a call, or false when it is not one.
// The model's output is parsed with a client body's bounds: a call nested past them is text.
static bool call_object(const std::string& text, Json& object) {
  auto parsed = try_parse_client_json(text);
  if (!parsed) return false;
  object = std::move(*parsed);
  return object.is_object() && object.contains("name") && object["name"].is_string();
}

void ToolCallStream::scan_json_calls(ToolDelta& out, bool at_end) {
  const bool array = request_.choice == ToolChoice::kRequired;
  while (mode_ == Mode::kCalls) {
    size_t start = 0;
    while (start < held_.size() && (is_space(held_[start]) || held_[start] == ';' || held_[start] == ',' ||
                                    (array && (held_[start] == '[' || held_[start] == ']'))))
      ++start;
    held_.erase(0, start);
    if (held_.empty()) return;
    if (held_.compare(0, kPythonTag.size(), kPythonTag) == 0) {
      held_.erase(0, kPythonTag.size());
      continue;
    }
    if (held_[0] != '{') return give_up(out);
    const size_t end = json_value_end(held_, 0);
    if (end == std::string::npos) {
      if (at_end) give_up(out);
      return;
    }
    Json object;
    if (!call_object(held_.substr(0, end), object)) return give_up(out);
    emit_call(object, out);
    held_.erase(0, end);
  }
}

void ToolCallStream::scan_hermes(ToolDelta& out, bool at_end) {
  while (true) {
    if (mode_ != Mode::kCalls) {  // outside a block
      const size_t open = held_.find(kOpen);
      const size_t keep = open != std::string::npos ? 0 : at_end ? 0 : partial_marker(held_, kOpen);
      const std::string text = held_.substr(0, open != std::string::npos ? open : held_.size() - keep);
      // Whitespace between or after calls is not content.
      if (!(calls_.size() > 0 && blank(text))) {
        out.content += text;
        content_ += text;
      }
      if (open == std::string::npos) {
        held_.erase(0, held_.size() - keep);
        return;
      }
      held_.erase(0, open + kOpen.size());
      mode_ = Mode::kCalls;
    }
    const size_t close = held_.find(kClose);
    if (close == std::string::npos && !at_end) return;
    const std::string body = held_.substr(0, close);
    Json object;
    if (call_object(body, object)) {
      emit_call(object, out);
    } else {
      const std::string raw = std::string(kOpen) + body + (close != std::string::npos ? std::string(kClose) : "");
      out.content += raw;
      content_ += raw;
    }
    held_.erase(0, close == std::string::npos ? held_.size() : close + kClose.size());
    mode_ = Mode::kContent;
    if (held_.empty()) return;
  }
}

ToolDelta ToolCallStream::push(std::string_view text) {
  ToolDelta out;
  switch (request_.choice) {
    case ToolChoice::kNone:
      out.content = text;
      content_ += text;
      return out;
    case ToolChoice::kNamed:
      if (!named_started_) {
        named_started_ = true;
        calls_.push_back({new_tool_call_id(), request_.named, ""});
        out.tool_calls.push_back({{"index", 0},
                                  {"id", calls_[0].id},
                                  {"type", "function"},
                                  {"function", {{"name", request_.named}, {"arguments", ""}}}});
      }
      if (!text.empty()) {
        calls_[0].arguments += text;
        out.tool_calls.push_back({{"index", 0}, {"function", {{"arguments", std::string(text)}}}});
      }
      return out;
    case ToolChoice::kRequired:
      held_ += text;
      scan_json_calls(out, false);
      return out;
    case ToolChoice::kAuto:
      held_ += text;
      if (parser_ == ToolParser::kHermes) {
        scan_hermes(out, false);
        return out;
      }
      if (mode_ == Mode::kUndecided) {
        const size_t first = held_.find_first_not_of(" \t\r\n");
        if (first == std::string::npos) return out;
        mode_ = held_[first] == '{' || held_.compare(first, kPythonTag.size(), kPythonTag) == 0 ? Mode::kCalls
                                                                                                  : Mode::kContent;
      }
      if (mode_ == Mode::kContent) give_up(out);
      else scan_json_calls(out, false);
      return out;
  }
  return out;
}

ToolDelta ToolCallStream::finish() {
  ToolDelta out;
  if (request_.choice == ToolChoice::kNamed) {
    if (!named_started_) out = push("");
    return out;
  }
  if (parser_ == ToolParser::kHermes && request_.choice == ToolChoice::kAuto) scan_hermes(out, true);
  else if (mode_ == Mode::kCalls) scan_json_calls(out, true);
  if (!held_.empty()) give_up(out);
  return out;
}

ParsedOutput parse_tool_output(const ToolRequest& request, ToolParser parser, const std::string& text) {
  ToolCallStream stream(request, parser);
  stream.push(text);
  stream.finish();
  return {stream.content(), stream.calls()};
}

}  // namespace optimate::server
