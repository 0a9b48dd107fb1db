// OpenAI request bodies -> SamplingParams, and the 400s a hostile or careless client gets.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/client_json.h"
#include "server/openai_request.h"

namespace optimate::server {
namespace {

constexpr int64_t kVocab = 49152;

Json body(const char* text) { return Json::parse(text); }

std::string error_param(const Json& b, bool chat = false) {
  try {
    if (chat) parse_chat_request(b, kVocab);
    else parse_completion_request(b, kVocab);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.param().empty() ? "<none>" : e.param();
  }
  return "<accepted>";
}

TEST(CompletionRequest, VllmExtrasReachSamplingParams) {
  auto r = parse_completion_request(body(R"({
      "model": "m", "prompt": "hi", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
      "top_k": 40, "min_p": 0.05, "seed": 42, "ignore_eos": true, "min_tokens": 2,
      "stop": "END", "stop_token_ids": [2, 3], "include_stop_str_in_output": true,
      "skip_special_tokens": false, "repetition_penalty": 1.1, "n": 2, "logprobs": 3,
      "priority": -4, "stream": true, "stream_options": {"include_usage": true},
      "some_unknown_field": {"ignored": true}})"),
                                    kVocab);
  EXPECT_EQ(std::get<std::string>(r.prompts.at(0)), "hi");
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.9f);
  EXPECT_EQ(r.params.top_k, 40);
  EXPECT_FLOAT_EQ(r.params.min_p, 0.05f);
  EXPECT_EQ(*r.params.seed, 42u);
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_EQ(r.params.min_tokens, 2);
  EXPECT_EQ(r.params.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.params.stop_token_ids, (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(r.params.include_stop_str_in_output);
  EXPECT_FALSE(r.params.skip_special_tokens);
  EXPECT_FLOAT_EQ(r.params.repetition_penalty, 1.1f);
  EXPECT_EQ(r.params.n, 2);
  EXPECT_EQ(*r.params.logprobs, 3);
  EXPECT_EQ(r.priority.value, -4);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(CompletionRequest, PromptForms) {
  auto ids = parse_completion_request(body(R"({"prompt": [1, 2, 3]})"), kVocab);
  ASSERT_EQ(ids.prompts.size(), 1u);
  EXPECT_EQ(std::get<std::vector<int32_t>>(ids.prompts[0]), (std::vector<int32_t>{1, 2, 3}));
  auto one = parse_completion_request(body(R"({"prompt": ["x"]})"), kVocab);
  ASSERT_EQ(one.prompts.size(), 1u);
  EXPECT_EQ(std::get<std::string>(one.prompts[0]), "x");
  // Batches, as vLLM takes them: several strings, or several lists of token ids.
  auto texts = parse_completion_request(body(R"({"prompt": ["x", "y"]})"), kVocab);
  ASSERT_EQ(texts.prompts.size(), 2u);
  EXPECT_EQ(std::get<std::string>(texts.prompts[1]), "y");
  auto lists = parse_completion_request(body(R"({"prompt": [[1], [2, 3]]})"), kVocab);
  ASSERT_EQ(lists.prompts.size(), 2u);
  EXPECT_EQ(std::get<std::vector<int32_t>>(lists.prompts[1]), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(error_param(body(R"({"prompt": ["x", [1]]})")), "prompt");
  EXPECT_EQ(error_param(body(R"({"prompt": [[1], []]})")), "prompt");
  EXPECT_EQ(error_param(body(R"({"prompt": [1, 99999999]})")), "prompt");
  EXPECT_EQ(error_param(body(R"({"prompt": []})")), "prompt");
  EXPECT_EQ(error_param(body(R"({"max_tokens": 5})")), "prompt");
}

TEST(CompletionRequest, WrongTypesAndRangesAre400sNamingTheField) {
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "max_tokens": 0})")), "max_tokens");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "max_tokens": -3})")), "max_tokens");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "max_tokens": 1e300})")), "max_tokens");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "max_tokens": 99999999999999999999})")), "max_tokens");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "max_tokens": 2.5})")), "max_tokens");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "temperature": -1})")), "temperature");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "top_p": 0})")), "top_p");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "n": 0})")), "n");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "stop": [1]})")), "stop");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "stream_options": {"include_usage": true}})")),
            "stream_options");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "logprobs": 21})")), "logprobs");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "stop_token_ids": [-1]})")), "<accepted>");  // vLLM takes any int
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "max_tokens": "five"})")), "max_tokens");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "max_tokens": "2.5"})")), "max_tokens");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "temperature": "warm"})")), "temperature");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "temperature": "inf"})")), "temperature");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "stream": "maybe"})")), "stream");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "stream": 2})")), "stream");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "echo": " true"})")), "echo");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "stop_token_ids": ["two"]})")), "stop_token_ids");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "seed": "99999999999999999999"})")), "seed");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "max_tokens": 4.0})")), "<accepted>");
  EXPECT_EQ(error_param(body(R"({"prompt": "x", "max_tokens": null})")), "<accepted>");
}

// vLLM validates requests with pydantic in its lax mode: a number written as a string, a boolean
// as a number or a word, is taken (each case below is what vLLM 0.26's CompletionRequest gives).
TEST(CompletionRequest, ValuesConvertAsVllmsPydanticModelsConvertThem) {
  auto r = parse_completion_request(body(R"({
      "prompt": "x", "max_tokens": " 1_000 ", "n": "2.0", "temperature": "0.5", "top_p": "+.9e0",
      "top_k": true, "seed": "-0", "stream": "YES", "echo": 0, "ignore_eos": "on",
      "skip_special_tokens": "f", "stop_token_ids": ["2", 3], "logprobs": "1"})"),
                                    kVocab);
  EXPECT_EQ(*r.max_tokens, 1000);
  EXPECT_EQ(r.params.n, 2);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.9f);
  EXPECT_EQ(r.params.top_k, 1);
  EXPECT_EQ(*r.params.seed, 0u);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_FALSE(r.params.skip_special_tokens);
  EXPECT_EQ(r.params.stop_token_ids, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(*r.params.logprobs, 1);
  auto temperature_one = parse_completion_request(body(R"({"prompt": "x", "temperature": true})"), kVocab);
  EXPECT_FLOAT_EQ(temperature_one.params.temperature, 1.0f);
  // Unicode white space around a number (a no-break space, an ideographic space), as pydantic
  // strips it; a boolean as the first token id of a prompt.
  auto spaced = parse_completion_request(body("{\"prompt\": [true, 5], \"max_tokens\": \"\u00a02\u3000\"}"), kVocab);
  EXPECT_EQ(*spaced.max_tokens, 2);
  EXPECT_EQ(std::get<std::vector<int32_t>>(spaced.prompts.at(0)), (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(error_param(body("{\"prompt\": \"x\", \"max_tokens\": \"\u00a0\"}")), "max_tokens");
}

TEST(ChatRequest, MessagesAndChatOnlyFields) {
  auto r = parse_chat_request(body(R"({
      "messages": [{"role": "system", "content": "be brief"},
                   {"role": "user", "content": [{"type": "text", "text": "a"},
                                                {"type": "text", "text": "b"}]}],
      "max_completion_tokens": 9, "max_tokens": 3, "logprobs": true, "top_logprobs": 2})"),
                              kVocab);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "a\nb");
  EXPECT_EQ(*r.max_tokens, 9);  // max_completion_tokens wins
  EXPECT_EQ(*r.params.logprobs, 2);
  EXPECT_FALSE(r.add_special_tokens);
  EXPECT_EQ(error_param(body(R"({"messages": []})"), true), "messages");
  // Any role a template renders, as vLLM's CustomChatCompletionMessageParam takes it.
  EXPECT_EQ(error_param(body(R"({"messages": [{"role": "wizard", "content": "x"}]})"), true), "<accepted>");
  EXPECT_EQ(error_param(body(R"({"messages": [{"role": 5, "content": "x"}]})"), true), "role");
  EXPECT_EQ(error_param(body(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"), true),
            "messages");
  EXPECT_EQ(error_param(body(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})"), true),
            "top_logprobs");
  EXPECT_EQ(error_param(body(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{}]})"), true),
            "tools");
}

TEST(ContextLength, VllmMessagesNamingThePromptField) {
  ChatRequest r;
  r.max_tokens = 100;
  try {
    resolve_max_tokens(r, 10, 64, 16, "messages");
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.message(),
              "This model's maximum context length is 64 tokens. However, you requested 110 "
              "tokens (10 in the messages, 100 in the completion). Please reduce the length "
              "of the messages or completion.");
    EXPECT_EQ(e.param(), "max_tokens");
  }
  // /v1/completions has no messages: its errors speak of the prompt.
  CompletionRequest completion;
  try {
    resolve_max_tokens(completion, 64, 64, 16, "prompt");
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.message(),
              "This model's maximum context length is 64 tokens. However, you requested 64 "
              "tokens in the prompt. Please reduce the length of the prompt.");
    EXPECT_EQ(e.param(), "prompt");
  }
  CompletionRequest defaults;
  resolve_max_tokens(defaults, 10, 64, 16, "prompt");
  EXPECT_EQ(defaults.params.max_tokens, 16);
  ChatRequest chat;
  resolve_max_tokens(chat, 10, 64, INT64_MAX, "messages");
  EXPECT_EQ(chat.params.max_tokens, 54);  // the rest of the context
  EXPECT_THROW(resolve_max_tokens(chat, 64, 64, 16, "messages"), ApiError);
}

TEST(ApiErrors, KeepTextAfterANul) {
  const std::string name("a\0b", 3);
  ApiError e(404, "The model `" + name + "` does not exist.", "model");
  EXPECT_EQ(e.message().size(), std::string("The model `a?b` does not exist.").size());
  EXPECT_NE(error_body(404, e.message()).find("a\\u0000b"), std::string::npos);
}

TEST(JsonBody, MalformedInvalidUtf8AndNonObjectsAre400) {
  EXPECT_THROW(parse_json_body("{\"a\": "), ApiError);
  EXPECT_THROW(parse_json_body("{\"a\": \"\xff\"}"), ApiError);
  EXPECT_THROW(parse_json_body("[1, 2]"), ApiError);
  EXPECT_THROW(parse_json_body(""), ApiError);
  // Deep nesting is refused while parsing (later code walks values recursively): a clean
  // answer naming the member it is in, no stack overflow.
  EXPECT_THROW(parse_json_body(std::string(100000, '[') + std::string(100000, ']')), ApiError);
  try {
    parse_json_body("{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}");
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "a");
  }
}

}  // namespace
}  // namespace optimate::server
