// POST /v1/chat/completions bodies.
#include <algorithm>
#include <string_view>

#include "server/api_error.h"
#include "server/client_json.h"
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

// An assistant message's tool_calls: [{"id", "type": "function", "function": {"name",
// "arguments": JSON text}}]; the arguments reach the template parsed, as vLLM passes them.
std::vector<ChatToolCall> message_tool_calls(const Json& calls, size_t index) {
  if (!calls.is_array()) bad_request("messages", "messages[{}].tool_calls must be a list", index);
  std::vector<ChatToolCall> out;
  for (const auto& call : calls) {
    const Json* function = call.is_object() ? get_object(call, "function") : nullptr;
    auto name = function ? get_string(*function, "name") : std::nullopt;
    if (!name) bad_request("messages", "messages[{}].tool_calls[].function.name is required", index);
    ChatToolCall c{*name, Json::object()};
    if (auto args = function->find("arguments"); args != function->end() && !args->is_null()) {
      if (!args->is_string()) {
        c.arguments = *args;
      } else {
        ClientJsonError error;
        auto parsed = try_parse_client_json(args->get_ref<const std::string&>(), &error);
        if (!parsed)
          bad_request("messages", "messages[{}].tool_calls[].function.arguments must be JSON: {}", index,
                      error.message);
        c.arguments = std::move(*parsed);
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

ChatRequest parse_chat_request(const Json& body, int64_t vocab_size) {
  ChatRequest r;
  r.add_special_tokens = false;  // the chat template already places BOS where the model wants it
  parse_generation_fields(body, r, vocab_size);
  r.max_tokens = get_int(body, "max_completion_tokens");
  if (r.max_tokens) r.max_tokens_field = "max_completion_tokens";
  else r.max_tokens = get_int(body, "max_tokens");

  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty())
    bad_request("messages", "messages must be a non-empty list");
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    if (!m.is_object()) bad_request("messages", "messages[{}] must be an object", i);
    auto role = get_string(m, "role");
    if (!role) bad_request("messages", "messages[{}].role is required", i);
    // Any role a template can render, as vLLM's custom message type takes it.
    auto content = m.find("content");
    ChatMessage message{*role, content == m.end() ? std::string() : message_content(*content, i)};
    if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
      message.tool_calls = message_tool_calls(*calls, i);
      message.has_tool_calls = true;
    }
    r.messages.push_back(std::move(message));
  }

  // vLLM hands it to the chat template (gpt-oss's reads it); the templates Optimate renders do
  // not, so a valid value changes nothing, and any other is refused as vLLM refuses it.
  if (auto effort = body.find("reasoning_effort"); effort != body.end() && !effort->is_null()) {
    static constexpr std::string_view kEfforts[] = {"none", "minimal", "low", "medium", "high", "xhigh", "max"};
    if (!effort->is_string() || std::ranges::find(kEfforts, effort->get_ref<const std::string&>()) == std::end(kEfforts))
      bad_request("reasoning_effort", "reasoning_effort must be one of 'none', 'minimal', 'low', 'medium', 'high', "
                  "'xhigh', 'max' (or null), not {}", effort->dump());
  }

  r.tools = parse_tool_request(body);
  if (r.grammar && (r.tools.choice == ToolChoice::kNamed || r.tools.choice == ToolChoice::kRequired))
    bad_request("tool_choice", "You can only either use structured outputs or a forced tool call, not both.");
  if (auto forced = forced_call_grammar(r.tools)) r.grammar = std::move(forced);
  r.continue_final_message = get_bool(body, "continue_final_message").value_or(false);
  auto generation_prompt = get_bool(body, "add_generation_prompt");
  if (r.continue_final_message && generation_prompt.value_or(false))
    bad_request("continue_final_message", "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  r.add_generation_prompt = generation_prompt.value_or(!r.continue_final_message);
  r.echo = get_bool(body, "echo").value_or(false);
  r.logprobs = get_bool(body, "logprobs").value_or(false);
  auto top = get_int(body, "top_logprobs");
  if (top && *top != 0 && !r.logprobs) bad_request("top_logprobs", "top_logprobs requires logprobs=true");
  if (r.logprobs) r.params.logprobs = top.value_or(0);
  if (top) r.logprobs_field = "top_logprobs";
  // echo in chat repeats the last message; the prompt's logprobs come only with prompt_logprobs.
  validate_sampling(r);
  return r;
}

}  // namespace optimate::server
