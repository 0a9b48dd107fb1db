// Client fields end to end over HTTP with the scripted backend: echo (with prompt logprobs),
// best_of, tool calls whole and streamed, grammars reaching the engine or refused, token ids.
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "harness.h"
#include "test_client.h"

namespace optimate::server::testing {
namespace {

using nlohmann::json;

std::vector<json> events_of(const std::string& body) {
  std::vector<json> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("data: {", 0) == 0) out.push_back(json::parse(line.substr(6)));
  return out;
}

TEST(ClientFieldsHttp, EchoWithLogprobsAndZeroMaxTokensScoresThePrompt) {
  Harness h;
  TestClient c(h.port());
  auto r = c.post("/v1/completions", {{"prompt", "abc"}, {"echo", true}, {"max_tokens", 0}, {"logprobs", 1}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json choice = r.json()["choices"][0];
  EXPECT_EQ(choice["text"], "abc");  // the prompt alone
  const json& lp = choice["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"a", "b", "c"}));
  EXPECT_EQ(lp["token_logprobs"], json({nullptr, -1.0, -1.0}));
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["text_offset"], json({0, 1, 2}));
  EXPECT_EQ(choice["prompt_logprobs"][0], nullptr);
  EXPECT_EQ(choice["prompt_logprobs"][1][std::to_string(int('b'))]["rank"], 2);
  // The engine was asked for the prompt's logprobs and one token.
  const BackendRequest sent = h.backend.submitted_requests().back();
  EXPECT_EQ(sent.params.max_tokens, 1);
  EXPECT_EQ(*sent.params.prompt_logprobs, 1);
}

TEST(ClientFieldsHttp, EchoStreamsThePromptFirst) {
  Harness h;
  TestClient c(h.port());
  auto r = c.post("/v1/completions", {{"prompt", "xy"}, {"echo", true}, {"max_tokens", 2}, {"stream", true}});
  ASSERT_EQ(r.status, 200);
  std::string text;
  for (const json& e : events_of(r.body)) text += e["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, "xyab");
}

TEST(ClientFieldsHttp, BestOfReturnsTheMostLikelyChoices) {
  Harness h;
  TestClient c(h.port());
  // The fake makes sequence i less likely than i - 1: of 4, sequences 0 and 1 are the best.
  auto r = c.post("/v1/completions", {{"prompt", "p"}, {"best_of", 4}, {"n", 2}, {"max_tokens", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.json();
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());  // logprobs were not asked for
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);        // all four were generated
  EXPECT_EQ(h.backend.submitted_requests().back().params.n, 4);
}

json chat_body(const json& extra) {
  json body = {{"messages", {{{"role", "user"}, {"content", "weather in Paris?"}}}},
               {"max_tokens", 200},
               {"tools", {{{"type", "function"},
                           {"function", {{"name", "get_weather"},
                                         {"parameters", {{"type", "object"},
                                                         {"properties", {{"city", {{"type", "string"}}}}}}}}}}}}};
  if (extra.is_object()) body.update(extra);
  return body;
}

TEST(ClientFieldsHttp, AutoToolCallsWholeAndStreamed) {
  Harness h;
  h.backend.set_max_model_len(1024);
  h.backend.script("Sure.<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>");
  TestClient c(h.port());
  auto r = c.post("/v1/chat/completions", chat_body({}));
  ASSERT_EQ(r.status, 200) << r.body;
  const json choice = r.json()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Sure.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], R"({"city": "Paris"})");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["type"], "function");

  auto s = c.post("/v1/chat/completions", chat_body({{"stream", true}}));
  ASSERT_EQ(s.status, 200);
  std::string content, arguments, name, finish;
  for (const json& e : events_of(s.body)) {
    const json& ch = e["choices"][0];
    if (ch["delta"].contains("content")) content += ch["delta"]["content"].get<std::string>();
    if (ch["delta"].contains("tool_calls"))
      for (const json& t : ch["delta"]["tool_calls"]) {
        if (t["function"].contains("name")) name = t["function"]["name"];
        if (t["function"].contains("arguments")) arguments += t["function"]["arguments"].get<std::string>();
      }
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  EXPECT_EQ(content, "Sure.");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(arguments, R"({"city": "Paris"})");
  EXPECT_EQ(finish, "tool_calls");
}

TEST(ClientFieldsHttp, NamedToolChoiceCompilesItsSchemaAndAnswersWithTheCall) {
  Harness h;
  h.backend.set_max_model_len(1024);
  h.backend.script(R"({"city": "Lyon"})");
  TestClient c(h.port());
  auto r = c.post("/v1/chat/completions",
                  chat_body({{"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const json message = r.json()["choices"][0]["message"];
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], R"({"city": "Lyon"})");
  ASSERT_EQ(h.backend.grammars().size(), 1u);
  EXPECT_EQ(h.backend.grammars()[0].field, "tool_choice");
  EXPECT_TRUE(h.backend.submitted_requests().back().params.constraint != nullptr);
}

TEST(ClientFieldsHttp, GrammarErrorsAre400sNamingTheField) {
  Harness h;
  TestClient c(h.port());
  auto r = c.post("/v1/completions", {{"prompt", "p"}, {"guided_regex", "("}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["param"], "guided_regex");
  auto ok = c.post("/v1/completions", {{"prompt", "p"}, {"max_tokens", 1},
                                       {"response_format", {{"type", "json_object"}}}});
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(h.backend.grammars().back().kind, structured::GrammarKind::kJsonObject);
}

TEST(ClientFieldsHttp, RequestIdTokenIdsAndTokensAsIds) {
  Harness h;
  TestClient c(h.port());
  auto r = c.post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 2}, {"request_id", "my-id"},
                                      {"return_token_ids", true}, {"logprobs", 0},
                                      {"return_tokens_as_token_ids", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.json();
  EXPECT_EQ(j["id"], "cmpl-my-id");
  EXPECT_EQ(j["choices"][0]["prompt_token_ids"], json({'h', 'i'}));
  EXPECT_EQ(j["choices"][0]["token_ids"], json({'a', 'b'}));
  EXPECT_TRUE(h.backend.submitted_requests().back().tokens_as_ids);
}

TEST(ClientFieldsHttp, TruncatePromptTokensKeepsTheEnd) {
  Harness h;
  TestClient c(h.port());
  auto r = c.post("/v1/completions", {{"prompt", "abcdef"}, {"max_tokens", 1}, {"truncate_prompt_tokens", 2}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(h.backend.submitted_prompts().back(), (std::vector<int32_t>{'e', 'f'}));
  // More than the context holds is refused, as vLLM refuses it (the fake model's is 64).
  r = c.post("/v1/completions", {{"prompt", "abcdef"}, {"max_tokens", 1}, {"truncate_prompt_tokens", 65}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["param"], "truncate_prompt_tokens") << r.body;
}

}  // namespace
}  // namespace optimate::server::testing
