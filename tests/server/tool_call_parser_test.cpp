// Tool calls read back from model text, whole and streamed in every split, as vLLM's hermes
// and llama3_json parsers read them; tool_choice checks and the forced-call grammar.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/tool_call_parser.h"
#include "server/tool_calls.h"

namespace optimate::server {
namespace {

ToolRequest tools(const char* choice_json = R"("auto")") {
  Json body = Json::parse(std::string(R"({"tools": [
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
      {"type": "function", "function": {"name": "now"}}], "tool_choice": )") + choice_json + "}");
  return parse_tool_request(body);
}

// Streams `text` in pieces of `step` bytes and gathers content and calls as a client would.
ParsedOutput streamed(const ToolRequest& request, ToolParser parser, const std::string& text, size_t step) {
  ToolCallStream stream(request, parser);
  ParsedOutput out;
  auto take = [&](const ToolDelta& d) {
    out.content += d.content;
    for (const auto& item : d.tool_calls) {
      const size_t index = item["index"].get<size_t>();
      if (index >= out.calls.size()) out.calls.resize(index + 1);
      if (item.contains("id")) out.calls[index].id = item["id"];
      const Json& f = item["function"];
      if (f.contains("name")) out.calls[index].name = f["name"];
      if (f.contains("arguments")) out.calls[index].arguments += f["arguments"].get<std::string>();
    }
  };
  for (size_t i = 0; i < text.size(); i += step) take(stream.push(text.substr(i, step)));
  take(stream.finish());
  return out;
}

void expect_same_everywhere(const ToolRequest& request, ToolParser parser, const std::string& text,
                            const std::string& content, const std::vector<std::pair<std::string, std::string>>& calls) {
  for (size_t step : {text.size() + 1, size_t{1}, size_t{3}, size_t{7}}) {
    const ParsedOutput out = step > text.size() ? parse_tool_output(request, parser, text)
                                                : streamed(request, parser, text, step);
    EXPECT_EQ(out.content, content) << "step " << step;
    ASSERT_EQ(out.calls.size(), calls.size()) << "step " << step;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(out.calls[i].name, calls[i].first);
      EXPECT_EQ(out.calls[i].arguments, calls[i].second);
      EXPECT_EQ(out.calls[i].id.rfind("chatcmpl-tool-", 0), 0u);
    }
  }
}

TEST(HermesToolCalls, TextThenCalls) {
  const std::string text =
      "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>";
  expect_same_everywhere(tools(), ToolParser::kHermes, text, "Let me check.",
                         {{"get_weather", R"({"city": "Paris"})"}, {"now", "{}"}});
}

TEST(HermesToolCalls, PlainTextAndAlmostMarkers) {
  expect_same_everywhere(tools(), ToolParser::kHermes, "a < b and <tool> is not a call", "a < b and <tool> is not a call",
                         {});
}

TEST(HermesToolCalls, UnclosedLastBlockCountsBadJsonIsContent) {
  expect_same_everywhere(tools(), ToolParser::kHermes, "<tool_call>{\"name\": \"now\", \"arguments\": {}}", "",
                         {{"now", "{}"}});
  expect_same_everywhere(tools(), ToolParser::kHermes, "x<tool_call>{not json}</tool_call>",
                         "x<tool_call>{not json}</tool_call>", {});
}

// A client parses the arguments as JSON: arguments written as a string of JSON pass as they
// are, any other string becomes a JSON string (vLLM's json.dumps), never bare text.
TEST(HermesToolCalls, ArgumentsAreAlwaysJsonText) {
  expect_same_everywhere(tools(), ToolParser::kHermes,
                         R"(<tool_call>{"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}</tool_call>)", "",
                         {{"get_weather", R"({"city": "Paris"})"}});
  expect_same_everywhere(tools(), ToolParser::kHermes, R"(<tool_call>{"name": "now", "arguments": "notobj"}</tool_call>)",
                         "", {{"now", R"("notobj")"}});
}

TEST(Llama3JsonToolCalls, JsonOutputIsCallsTextIsContent) {
  expect_same_everywhere(tools(), ToolParser::kLlama3Json,
                         R"({"name": "get_weather", "parameters": {"city": "Lyon"}}; {"name": "now", "parameters": {}})",
                         "", {{"get_weather", R"({"city": "Lyon"})"}, {"now", "{}"}});
  expect_same_everywhere(tools(), ToolParser::kLlama3Json, "The weather is {fine}.", "The weather is {fine}.", {});
}

TEST(ForcedToolCalls, RequiredReadsTheArray) {
  expect_same_everywhere(tools(R"("required")"), ToolParser::kHermes,
                         R"([{"name": "now", "parameters": {}}, {"name": "get_weather", "parameters": {"city": "Oslo"}}])",
                         "", {{"now", "{}"}, {"get_weather", R"({"city": "Oslo"})"}});
}

TEST(ForcedToolCalls, NamedStreamsItsArguments) {
  const ToolRequest request = tools(R"({"type": "function", "function": {"name": "get_weather"}})");
  expect_same_everywhere(request, ToolParser::kHermes, R"({"city": "Rome"})", "", {{"get_weather", R"({"city": "Rome"})"}});
  ToolCallStream stream(request, ToolParser::kHermes);
  const ToolDelta first = stream.push("{\"ci");
  ASSERT_EQ(first.tool_calls.size(), 2u);  // the header at once, then the first arguments
  EXPECT_EQ(first.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(first.tool_calls[0]["type"], "function");
  EXPECT_EQ(first.tool_calls[1]["function"]["arguments"], "{\"ci");
}

TEST(ForcedToolCalls, ParallelFalseKeepsTheFirstCall) {
  Json body = Json::parse(R"({"tools": [{"type": "function", "function": {"name": "now"}}],
                              "tool_choice": "required", "parallel_tool_calls": false})");
  const ToolRequest request = parse_tool_request(body);
  const ParsedOutput out = parse_tool_output(request, ToolParser::kHermes,
                                             R"([{"name": "now", "parameters": {}}, {"name": "now", "parameters": {}}])");
  EXPECT_EQ(out.calls.size(), 1u);
  EXPECT_NE(forced_call_grammar(request)->text.find("\"maxItems\":1"), std::string::npos);
}

std::string refusal(const char* body) {
  try {
    parse_tool_request(Json::parse(body));
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.param() + ": " + e.message();
  }
  return "<accepted>";
}

TEST(ToolChoice, CheckedAsVllmChecksIt) {
  EXPECT_EQ(refusal(R"({"tool_choice": "auto"})"), "tool_choice: When using `tool_choice`, `tools` must be set.");
  EXPECT_NE(refusal(R"({"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": "sometimes"})")
                .find("Invalid value for `tool_choice`"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"tools": [{"type": "function", "function": {"name": "a"}}],
                        "tool_choice": {"type": "function", "function": {"name": "b"}}})")
                .find("does not match any of the specified `tools`"),
            std::string::npos);
  EXPECT_EQ(refusal(R"({"tools": [{"type": "function", "function": {}}]})").substr(0, 6), "tools:");
  EXPECT_EQ(refusal(R"({"tool_choice": "none"})"), "<accepted>");
  // tools without tool_choice means auto; "required" with no tools means none.
  EXPECT_EQ(parse_tool_request(Json::parse(R"({"tools": [{"type": "function", "function": {"name": "a"}}]})")).choice,
            ToolChoice::kAuto);
  EXPECT_EQ(parse_tool_request(Json::parse(R"({"tools": [], "tool_choice": "required"})")).choice, ToolChoice::kNone);
}

TEST(ToolChoice, ForcedGrammarFollowsVllmsSchema) {
  const auto named = forced_call_grammar(tools(R"({"type": "function", "function": {"name": "now"}})"));
  ASSERT_TRUE(named);
  EXPECT_EQ(Json::parse(named->text), Json::parse(R"({"type": "object", "properties": {}})"));
  const auto required = forced_call_grammar(tools(R"("required")"));
  const Json schema = Json::parse(required->text);
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  ASSERT_EQ(schema["items"]["anyOf"].size(), 2u);
  EXPECT_EQ(schema["items"]["anyOf"][0]["properties"]["name"]["enum"][0], "get_weather");
  EXPECT_FALSE(forced_call_grammar(tools()));
}

}  // namespace
}  // namespace optimate::server
