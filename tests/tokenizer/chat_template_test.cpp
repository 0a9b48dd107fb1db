// Chat templates render exactly what transformers' apply_chat_template(tokenize=False)
// renders with jinja2 (fixtures), and the rendered prompt tokenizes to the same ids.
#include <gtest/gtest.h>

#include "core/error.h"
#include "fixtures.h"

namespace optimate {
namespace {

using testing::read_fixture;

std::vector<ChatMessage> messages_of(const nlohmann::json& c) {
  std::vector<ChatMessage> out;
  for (const auto& m : c.at("messages")) out.push_back({m.at("role"), m.at("content")});
  return out;
}

void expect_renders(const Tokenizer& tok, const ChatTemplate& tmpl, const std::string& fixture,
                    const ChatRenderOptions& options = {}) {
  const nlohmann::json f = read_fixture(fixture);
  int equal = 0, total = 0;
  for (const auto& c : f.at("cases")) {
    const auto messages = messages_of(c);
    const bool gen = c.at("add_generation_prompt").get<bool>();
    const std::string text = tmpl.render(messages, gen, options);
    EXPECT_EQ(text, c.at("text").get<std::string>()) << fixture << ": " << c.at("messages").dump();
    const auto ids = tok.encode(text, false);
    EXPECT_EQ(ids, c.at("ids").get<std::vector<int32_t>>()) << fixture << ": " << c.at("messages").dump();
    ++total;
    equal += text == c.at("text").get<std::string>() && ids == c.at("ids").get<std::vector<int32_t>>();
  }
  std::printf("[ fixture  ] %s: %d/%d renderings equal to jinja2\n", fixture.c_str(), equal, total);
}

TEST(ChatTemplate, SmolLM2TemplateFromGguf) {
  auto tok = testing::smollm2();
  OPTIMATE_REQUIRE_TOKENIZER(tok);
  EXPECT_EQ(tok->chat_template_source(), read_fixture("chat_smollm2.json").at("template").get<std::string>());
  const ChatTemplate tmpl = tok->chat_template();
  EXPECT_EQ(tmpl.family(), ChatTemplate::Family::kChatMl);
  EXPECT_EQ(tmpl.default_system_prompt(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  expect_renders(*tok, tmpl, "chat_smollm2.json");
}

TEST(ChatTemplate, Qwen2Template) {
  auto tok = testing::smollm2();
  OPTIMATE_REQUIRE_TOKENIZER(tok);
  const auto tmpl = ChatTemplate::recognize(read_fixture("chat_qwen2.json").at("template").get<std::string>(), "");
  EXPECT_EQ(tmpl.default_system_prompt(), "You are a helpful assistant.");
  expect_renders(*tok, tmpl, "chat_qwen2.json");
}

TEST(ChatTemplate, Llama32Template) {
  auto tok = testing::llama3();
  OPTIMATE_REQUIRE_TOKENIZER(tok);
  const nlohmann::json f = read_fixture("chat_llama3.json");
  const auto tmpl = ChatTemplate::recognize(f.at("template").get<std::string>(), "<|begin_of_text|>");
  EXPECT_EQ(tmpl.family(), ChatTemplate::Family::kLlama31);
  expect_renders(*tok, tmpl, "chat_llama3.json", {.date_string = f.at("date_string").get<std::string>()});
}

TEST(ChatTemplate, Llama30Template) {
  auto tok = testing::llama3();
  OPTIMATE_REQUIRE_TOKENIZER(tok);
  const auto tmpl = ChatTemplate::recognize(read_fixture("chat_llama3.0.json").at("template").get<std::string>(),
                                            "<|begin_of_text|>");
  EXPECT_EQ(tmpl.family(), ChatTemplate::Family::kLlama3);
  expect_renders(*tok, tmpl, "chat_llama3.0.json");
}

TEST(ChatTemplate, UnrecognisedTemplateIsAClearError) {
  try {
    ChatTemplate::recognize("{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}", "<s>");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("not recognised"), std::string::npos) << e.what();
  }
  auto spm = testing::spm_json();
  EXPECT_THROW(spm->chat_template(), Error);  // the tiny tokenizer has no template
}

TEST(ChatTemplate, PythonStripMatchesJinjaTrim) {
  EXPECT_EQ(python_strip("\u3000 \t\n x y \u00a0\u2029"), "x y");
  EXPECT_EQ(python_strip("\u200bx\u200b"), "\u200bx\u200b");  // zero-width space is not space
  EXPECT_EQ(python_strip(""), "");
}

}  // namespace
}  // namespace optimate
