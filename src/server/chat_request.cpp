// POST /v1/chat/completions bodies.
#include "server/api_error.h"
#include "server/openai_request.h"

namespace optimate::server {

namespace {

// `content` is a string or a list of parts; only text parts are built.
std::string message_content(const Json& content, size_t index) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    bad_request("messages", "messages[{}].content must be a string or a list of parts", index);
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object())
      bad_request("messages", "messages[{}].content parts must be objects", index);
    auto type = get_string(part, "type");
    if (!type || *type != "text")
      bad_request("messages", "messages[{}]: only text content parts are supported", index);
    auto part_text = get_string(part, "text");
    if (!part_text) bad_request("messages", "messages[{}]: a text part needs `text`", index);
    if (!text.empty()) text += '\n';
    text += *part_text;
  }
  return text;
}

}  // namespace

ChatRequest parse_chat_request(const Json& body, int64_t vocab_size) {
  ChatRequest r;
  r.add_special_tokens = false;  // the chat template already places BOS where the model wants it
  parse_generation_fields(body, r, vocab_size);
  r.max_tokens = get_int(body, "max_completion_tokens");
  if (!r.max_tokens) r.max_tokens = get_int(body, "max_tokens");

  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty())
    bad_request("messages", "messages must be a non-empty list");
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    if (!m.is_object()) bad_request("messages", "messages[{}] must be an object", i);
    auto role = get_string(m, "role");
    if (!role) bad_request("messages", "messages[{}].role is required", i);
    if (*role != "system" && *role != "developer" && *role != "user" && *role != "assistant" &&
        *role != "tool")
      bad_request("messages", "messages[{}].role '{}' is not a valid role", i, *role);
    if (m.contains("tool_calls") && !m["tool_calls"].is_null())
      bad_request("messages", "messages[{}]: tool calls are not supported", i);
    auto content = m.find("content");
    r.messages.push_back({*role, content == m.end() ? std::string() : message_content(*content, i)});
  }

  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null() && !tools->empty())
    bad_request("tools", "tools are not supported");
  r.add_generation_prompt = get_bool(body, "add_generation_prompt").value_or(true);
  if (get_bool(body, "continue_final_message").value_or(false))
    bad_request("continue_final_message", "continue_final_message is not supported");
  r.logprobs = get_bool(body, "logprobs").value_or(false);
  auto top = get_int(body, "top_logprobs");
  if (top && !r.logprobs) bad_request("top_logprobs", "top_logprobs requires logprobs=true");
  if (r.logprobs) r.params.logprobs = top.value_or(0);
  validate_sampling(r);
  return r;
}

}  // namespace optimate::server
