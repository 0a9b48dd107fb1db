// The request fields vLLM reads beyond the basics: each is honoured (it reaches the engine's
// parameters or the response settings) or refused with a 400 naming it.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/openai_request.h"

namespace optimate::server {
namespace {

constexpr int64_t kVocab = 1000;

std::string refused(const std::string& json, bool chat = false) {
  try {
    Json b = Json::parse(json);
    if (chat) parse_chat_request(b, kVocab);
    else parse_completion_request(b, kVocab);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << e.message();
    EXPECT_NE(e.message(), "");
    return e.param();
  }
  return "<accepted>";
}

CompletionRequest completion(const std::string& extra) {
  return parse_completion_request(Json::parse(R"({"prompt": "hi")" + extra + "}"), kVocab);
}

TEST(ClientFields, TokenControlsReachTheParams) {
  auto r = completion(R"(, "logit_bias": {"12": 5.5, "7": -100}, "allowed_token_ids": [1, 2],
                        "bad_words": ["foo", " bar"], "prompt_logprobs": 3, "best_of": 4, "n": 2,
                        "request_id": "abc", "truncate_prompt_tokens": 5, "truncation_side": "right",
                        "return_tokens_as_token_ids": true, "return_token_ids": true)");
  EXPECT_EQ(r.params.logit_bias, (std::vector<std::pair<int32_t, float>>{{12, 5.5f}, {7, -100.0f}}));
  EXPECT_EQ(r.params.allowed_token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r.bad_words, (std::vector<std::string>{"foo", " bar"}));
  EXPECT_EQ(*r.params.prompt_logprobs, 3);
  EXPECT_EQ(*r.best_of, 4);
  EXPECT_EQ(r.request_id, "abc");
  EXPECT_EQ(*r.truncate_prompt_tokens, 5);
  EXPECT_FALSE(r.truncate_left);
  EXPECT_TRUE(r.return_tokens_as_token_ids);
  EXPECT_TRUE(r.return_token_ids);
}

TEST(ClientFields, EchoWithZeroMaxTokensScoresThePrompt) {
  auto r = completion(R"(, "echo": true, "max_tokens": 0, "logprobs": 1)");
  EXPECT_TRUE(r.echo_only);
  EXPECT_EQ(*r.max_tokens, 1);  // one token is drawn and not returned
  EXPECT_EQ(*r.params.prompt_logprobs, 1);
  EXPECT_EQ(refused(R"({"prompt": "hi", "max_tokens": 0})"), "max_tokens");
  auto streamed = completion(R"(, "echo": true, "logprobs": 2, "stream": true)");
  EXPECT_EQ(*streamed.params.prompt_logprobs, 2);  // echo's prompt logprobs may stream
}

TEST(ClientFields, StructuredOutputsFromEveryVllmSpelling) {
  using structured::GrammarKind;
  auto kind = [](const std::string& extra) { return completion(extra).grammar->kind; };
  EXPECT_EQ(kind(R"(, "response_format": {"type": "json_object"})"), GrammarKind::kJsonObject);
  EXPECT_EQ(kind(R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}})"),
            GrammarKind::kJsonSchema);
  EXPECT_EQ(kind(R"(, "structured_outputs": {"json": {"type": "integer"}})"), GrammarKind::kJsonSchema);
  EXPECT_EQ(kind(R"(, "structured_outputs": {"regex": "a+"})"), GrammarKind::kRegex);
  EXPECT_EQ(kind(R"(, "structured_outputs": {"choice": ["a", "b"]})"), GrammarKind::kChoice);
  EXPECT_EQ(kind(R"(, "structured_outputs": {"grammar": "root ::= \"a\""})"), GrammarKind::kEbnf);
  EXPECT_EQ(kind(R"(, "guided_json": "{\"type\": \"object\"}")"), GrammarKind::kJsonSchema);
  EXPECT_EQ(kind(R"(, "guided_regex": "[0-9]+")"), GrammarKind::kRegex);
  EXPECT_EQ(kind(R"(, "guided_choice": ["x"])"), GrammarKind::kChoice);
  EXPECT_EQ(kind(R"(, "guided_grammar": "start: \"a\"")"), GrammarKind::kLark);
  EXPECT_FALSE(completion(R"(, "response_format": {"type": "text"})").grammar);
  // Schemas keep the client's property order: it is the order the model writes them in.
  auto r = completion(R"(, "guided_json": {"type": "object", "properties": {"z": {}, "a": {}}})");
  EXPECT_LT(r.grammar->text.find("\"z\""), r.grammar->text.find("\"a\""));
  EXPECT_FALSE(completion(R"(, "structured_outputs": {"json_object": true, "disable_any_whitespace": true})")
                   .grammar->any_whitespace);
}

TEST(ClientFields, ConflictingOrUnknownConstraintsAreRefused) {
  EXPECT_EQ(refused(R"({"prompt": "a", "guided_regex": "a", "guided_choice": ["b"]})"), "guided_choice");
  EXPECT_EQ(refused(R"({"prompt": "a", "response_format": {"type": "xml"}})"), "response_format");
  EXPECT_EQ(refused(R"({"prompt": "a", "response_format": {"type": "json_schema"}})"), "response_format");
  EXPECT_EQ(refused(R"({"prompt": "a", "guided_choice": []})"), "guided_choice");
  EXPECT_EQ(refused(R"({"prompt": "a", "guided_decoding_backend": "outlines"})"), "guided_decoding_backend");
  // An outlines option vLLM's xgrammar backend ignores (an undeclared extra field in 0.26).
  EXPECT_EQ(refused(R"({"prompt": "a", "guided_whitespace_pattern": " "})"), "<accepted>");
  EXPECT_EQ(refused(R"({"messages": [{"role": "user", "content": "x"}], "guided_regex": "a",
                        "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"})", true),
            "tool_choice");
}

TEST(ClientFields, BadValuesNameTheirField) {
  EXPECT_EQ(refused(R"({"prompt": "a", "logit_bias": {"x": 1}})"), "logit_bias");
  EXPECT_EQ(refused(R"({"prompt": "a", "logit_bias": {"5000": 1}})"), "logit_bias");
  EXPECT_EQ(refused(R"({"prompt": "a", "logit_bias": {"5": 101}})"), "<accepted>");  // clamped, as vLLM clamps it
  EXPECT_EQ(refused(R"({"prompt": "a", "logit_bias": {"5": "-2.5"}})"), "<accepted>");  // a number, as pydantic reads it
  EXPECT_EQ(refused(R"({"prompt": "a", "logit_bias": {"5": "lots"}})"), "logit_bias");
  EXPECT_EQ(refused(R"({"prompt": "a", "allowed_token_ids": []})"), "allowed_token_ids");
  EXPECT_EQ(refused(R"({"prompt": "a", "allowed_token_ids": [1000]})"), "allowed_token_ids");
  EXPECT_EQ(refused(R"({"prompt": "a", "bad_words": [""]})"), "bad_words");
  EXPECT_EQ(refused(R"({"prompt": "a", "best_of": 1, "n": 2})"), "best_of");
  EXPECT_EQ(refused(R"({"prompt": "a", "best_of": 3, "stream": true})"), "best_of");
  EXPECT_EQ(refused(R"({"prompt": "a", "prompt_logprobs": 2, "stream": true})"), "prompt_logprobs");
  EXPECT_EQ(refused(R"({"prompt": "a", "prompt_logprobs": 21})"), "prompt_logprobs");
  EXPECT_EQ(refused(R"({"prompt": "a", "truncate_prompt_tokens": 0})"), "truncate_prompt_tokens");
  EXPECT_EQ(refused(R"({"prompt": "a", "truncation_side": "middle"})"), "truncation_side");
}

TEST(ClientFields, UnbuiltFieldsAreRefusedAtAnyValueThatMatters) {
  for (const char* field : {"prompt_embeds", "logits_processors", "kv_transfer_params", "vllm_xargs", "cache_salt",
                            "suffix", "mm_processor_kwargs", "logprob_token_ids"}) {
    Json body = {{"prompt", "a"}, {field, field == std::string("logits_processors") ? Json({"m.P"}) : Json("x")}};
    EXPECT_EQ(refused(body.dump()), field);
  }
  EXPECT_EQ(refused(R"({"prompt": "a", "use_beam_search": true})"), "use_beam_search");
  EXPECT_EQ(refused(R"({"prompt": "a", "length_penalty": 0.5})"), "length_penalty");
  EXPECT_EQ(refused(R"({"messages": [{"role": "user", "content": "x"}], "chat_template": "{{x}}"})", true),
            "chat_template");
  // Their defaults are accepted.
  EXPECT_EQ(refused(R"({"prompt": "a", "use_beam_search": false, "length_penalty": 1.0, "vllm_xargs": {},
                        "logits_processors": null, "spaces_between_special_tokens": true, "user": "u"})"),
            "<accepted>");
}

TEST(ClientFields, ChatToolsAndMessages) {
  auto r = parse_chat_request(Json::parse(R"({"messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"C\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "20"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})"),
                              kVocab);
  ASSERT_EQ(r.messages.size(), 3u);
  ASSERT_TRUE(r.messages[1].has_tool_calls);
  EXPECT_EQ(r.messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments.dump(), R"({"city":"Paris","unit":"C"})");
  EXPECT_EQ(r.tools.choice, ToolChoice::kNamed);
  ASSERT_TRUE(r.grammar);  // the named call is forced by its parameters' schema
  EXPECT_EQ(r.grammar->field, "tool_choice");
}

TEST(ClientFields, ContinueFinalMessage) {
  auto r = parse_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "x"},
      {"role": "assistant", "content": "The answer is"}], "continue_final_message": true, "echo": true})"),
                              kVocab);
  EXPECT_TRUE(r.continue_final_message);
  EXPECT_FALSE(r.add_generation_prompt);
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(refused(R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true,
                        "add_generation_prompt": true})", true),
            "continue_final_message");
}

}  // namespace
}  // namespace optimate::server
