// Chat templates: the model's Jinja template (GGUF tokenizer.chat_template or
// tokenizer_config.json "chat_template") is recognised by family and rendered natively,
// producing exactly the text jinja2 produces for plain role/content messages:
//   ChatML (SmolLM2, Qwen2): <|im_start|>role\ncontent<|im_end|>\n, with the template's default
//     system prompt inserted when the first message is not a system message;
//   Llama 3: <|start_header_id|>role<|end_header_id|>\n\ncontent|trim<|eot_id|> after BOS;
//   Llama 3.1/3.2: as Llama 3, always opening with a system block carrying the knowledge
//     cutoff and "Today Date", and tool/ipython messages as JSON under an ipython header; with
//     tools, "Environment: ipython" in the system block and the tools (JSON, indent 4) before
//     the first user message, and an assistant's tool call as {"name": ..., "parameters": ...}.
// Templates that do not show tools (SmolLM2's, Llama 3.0's) render as if there were none, as
// jinja2 does. Anything else (including tool-calling ChatML templates) is rejected with
// kUnsupported.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace optimate {

// A call an assistant message made (OpenAI's message.tool_calls[i].function).
struct ChatToolCall {
  std::string name;
  nlohmann::ordered_json arguments;  // parsed, as vLLM hands them to templates
};

struct ChatMessage {
  std::string role;
  std::string content;
  std::vector<ChatToolCall> tool_calls;  // assistant messages
  bool has_tool_calls = false;           // the message carried a tool_calls list (maybe empty)
};

struct ChatRenderOptions {
  // Llama 3.1+: "Today Date: ..." text. Empty: today's local date ("%d %b %Y") when the
  // template calls strftime_now, as transformers renders it, else the template's default.
  std::string date_string;
  // The request's tools ([{"type": "function", "function": {...}}]); null: none.
  const nlohmann::ordered_json* tools = nullptr;
};

class ChatTemplate {
 public:
  enum class Family { kChatMl, kLlama3, kLlama31 };

  // Throws Error(kUnsupported) when the template is not one we render.
  static ChatTemplate recognize(std::string_view source, std::string bos_token);

  Family family() const { return family_; }
  const std::string& default_system_prompt() const { return default_system_; }

  // Throws kInvalidArgument when the messages cannot be rendered (Llama 3 with no message).
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                     const ChatRenderOptions& options = {}) const;

 private:
  std::string render_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  std::string render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt,
                            const ChatRenderOptions& options) const;

  Family family_ = Family::kChatMl;
  std::string bos_;
  std::string default_system_;         // ChatML: empty when the template has none
  bool has_default_system_ = false;
  bool date_from_clock_ = false;       // Llama 3.1+: the template calls strftime_now
  std::string default_date_;
};

// Python's str.strip() (jinja's `trim`).
std::string python_strip(std::string_view text);

}  // namespace optimate
