#include "tokenizer/chat_template.h"

#include <ctime>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/python_json.h"
#include "tokenizer/utf8.h"

namespace optimate {
namespace {

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// Jinja string-literal escapes that templates use inside the default system prompt.
std::string unescape_literal(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    out += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
  }
  return out;
}

// Finds a literal '<|im_start|>system\n...<|im_end|>\n' (quoted with ' or ") and returns the
// text between; the default system prompt of SmolLM2 and Qwen2 templates.
bool find_default_system(std::string_view t, std::string& prompt) {
  for (const char quote : {'\'', '"'}) {
    const std::string open = std::string(1, quote) + "<|im_start|>system";
    for (size_t at = t.find(open); at != std::string_view::npos; at = t.find(open, at + 1)) {
      size_t p = at + open.size();
      if (t.substr(p, 1) == "\n") p += 1;
      else if (t.substr(p, 2) == "\\n") p += 2;
      else continue;
      const size_t end = t.find("<|im_end|>", p);
      if (end == std::string_view::npos) continue;
      const std::string_view body = t.substr(p, end - p);
      if (body.find(quote) != std::string_view::npos) continue;  // message content, not a literal
      prompt = unescape_literal(body);
      return true;
    }
  }
  return false;
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%d %b %Y", &local);
  return buf;
}

}  // namespace

std::string python_strip(std::string_view text) {
  size_t begin = 0, end = text.size();
  while (begin < end) {
    size_t p = begin;
    if (!tokenizer::is_python_space(tokenizer::next_codepoint(text, p))) break;
    begin = p;
  }
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
    size_t p = start;
    if (!tokenizer::is_python_space(tokenizer::next_codepoint(text, p))) break;
    end = start;
  }
  return std::string(text.substr(begin, end - begin));
}

ChatTemplate ChatTemplate::recognize(std::string_view source, std::string bos_token) {
  ChatTemplate t;
  t.bos_ = std::move(bos_token);
  if (contains(source, "<|im_start|>") && contains(source, "<|im_end|>")) {
    if (contains(source, "tool"))
      fail(ErrorCode::kUnsupported, "chat template: ChatML templates with tool calling are not supported");
    t.family_ = Family::kChatMl;
    t.has_default_system_ = find_default_system(source, t.default_system_);
    return t;
  }
  if (contains(source, "<|start_header_id|>") && contains(source, "<|eot_id|>")) {
    if (contains(source, "Cutting Knowledge Date")) {
      t.family_ = Family::kLlama31;
      t.date_from_clock_ = contains(source, "strftime_now");
      t.default_date_ = "26 Jul 2024";
    } else {
      t.family_ = Family::kLlama3;
    }
    return t;
  }
  fail(ErrorCode::kUnsupported,
       "chat template not recognised (supported: ChatML as in SmolLM2/Qwen2, Llama 3, Llama 3.1/3.2); "
       "it begins {:?}",
       source.substr(0, 80));
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                 const ChatRenderOptions& options) const {
  if (family_ == Family::kChatMl) return render_chatml(messages, add_generation_prompt);
  return render_llama3(messages, add_generation_prompt, options);
}

std::string ChatTemplate::render_chatml(std::span<const ChatMessage> messages,
                                        bool add_generation_prompt) const {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0 && has_default_system_ && messages[0].role != "system")
      out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
    out += "<|im_start|>" + messages[i].role + "\n" + messages[i].content + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string ChatTemplate::render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                        const ChatRenderOptions& options) const {
  if (messages.empty()) fail(ErrorCode::kInvalidArgument, "chat template: Llama 3 needs at least one message");
  auto header = [](std::string_view role) {
    return "<|start_header_id|>" + std::string(role) + "<|end_header_id|>\n\n";
  };
  std::string out;
  if (family_ == Family::kLlama3) {
    out += bos_;
    for (const ChatMessage& m : messages) out += header(m.role) + python_strip(m.content) + "<|eot_id|>";
  } else {
    out += bos_;
    std::string system;
    if (messages[0].role == "system") {
      system = python_strip(messages[0].content);
      messages = messages.subspan(1);
    }
    const std::string date = !options.date_string.empty() ? options.date_string
                             : date_from_clock_          ? today()
                                                         : default_date_;
    const bool tools = options.tools && !options.tools->is_null();
    out += header("system") + (tools ? "Environment: ipython\n" : "") +
           "Cutting Knowledge Date: December 2023\nToday Date: " + date + "\n\n" + system + "<|eot_id|>";
    if (tools) {
      // The template's default, tools_in_user_message: they open the first user message.
      if (messages.empty())
        fail(ErrorCode::kInvalidArgument,
             "chat template: Cannot put tools in the first user message when there's no first user message!");
      out += header("user") +
             "Given the following functions, please respond with a JSON for a function call with its proper "
             "arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, "
             "\"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n";
      for (const auto& t : *options.tools) out += python_json(t, 4) + "\n\n";
      out += python_strip(messages[0].content) + "<|eot_id|>";
      messages = messages.subspan(1);
    }
    for (const ChatMessage& m : messages) {
      if (m.has_tool_calls) {
        if (m.tool_calls.size() != 1)
          fail(ErrorCode::kInvalidArgument, "chat template: This model only supports single tool-calls at once!");
        out += header("assistant") + "{\"name\": \"" + m.tool_calls[0].name + "\", \"parameters\": " +
               python_json(m.tool_calls[0].arguments) + "}<|eot_id|>";
      } else if (m.role == "tool" || m.role == "ipython") {
        // The template tests `content is iterable`, which a string is: it is written as JSON.
        out += header("ipython") +
               nlohmann::json(m.content).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
               "<|eot_id|>";
      } else {
        out += header(m.role) + python_strip(m.content) + "<|eot_id|>";
      }
    }
  }
  if (add_generation_prompt) out += header("assistant");
  return out;
}

}  // namespace optimate
