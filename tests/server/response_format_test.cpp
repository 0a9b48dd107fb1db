// Chunk and response JSON in the shapes OpenAI clients and vLLM benchmark tools parse.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/openai_response.h"

namespace optimate::server {
namespace {

const ResponseMeta kMeta{"chatcmpl-1", 1700000000, "m"};

TEST(ChatChunk, FirstChunkCarriesRoleAndText) {
  ChoiceDelta d;
  d.text = "Hel";
  Json first = Json::parse(chat_chunk(kMeta, d, true, nullptr));
  EXPECT_EQ(first, Json::parse(R"({"id":"chatcmpl-1","object":"chat.completion.chunk",
      "created":1700000000,"model":"m","choices":[{"index":0,"delta":{"role":"assistant",
      "content":"Hel"},"logprobs":null,"finish_reason":null}]})"));
  d.text = "";
  d.finish_reason = "stop";
  Json last = Json::parse(chat_chunk(kMeta, d, false, nullptr));
  EXPECT_EQ(last["choices"][0]["delta"], Json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(last["choices"][0]["stop_reason"], nullptr);
}

TEST(UsageChunk, HasEmptyChoices) {
  Json u = Json::parse(usage_chunk(kMeta, {5, 3}, true));
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"], Json::parse(R"({"prompt_tokens":5,"total_tokens":8,"completion_tokens":3})"));
}

TEST(Sse, Framing) {
  EXPECT_EQ(sse_event("{}"), "data: {}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(CompletionLogprobs, LegacyParallelArrays) {
  ChoiceDelta d;
  d.text = "ab";
  d.want_logprobs = true;
  d.text_offset = 4;
  d.logprobs = {{{1, "a", -0.25, 1}, {{1, "a", -0.25, 1}, {2, "b", -2.0, 2}}},
                {{2, "b", -std::numeric_limits<double>::infinity(), 9}, {}}};
  d.finish_reason = "length";
  Json j = Json::parse(completion_response({"cmpl-1", 1, "m"}, {d}, {1, 2}));
  const Json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], Json::parse(R"(["a","b"])"));
  EXPECT_EQ(lp["text_offset"], Json::parse("[4,5]"));
  EXPECT_EQ(lp["token_logprobs"], Json::parse("[-0.25,-9999.0]"));
  EXPECT_EQ(lp["top_logprobs"][0], Json::parse(R"({"a":-0.25,"b":-2.0})"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
}

TEST(ChatLogprobs, ContentEntriesWithBytes) {
  ChoiceDelta d;
  d.text = "é";
  d.want_logprobs = true;
  d.logprobs = {{{5, "é", -0.5, 1}, {{5, "é", -0.5, 1}}}};
  d.finish_reason = "stop";
  Json j = Json::parse(chat_response(kMeta, {d}, {1, 1}));
  const Json& entry = j["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(entry["bytes"], Json::parse("[195,169]"));
  EXPECT_EQ(entry["top_logprobs"][0]["token"], "é");
  EXPECT_EQ(j["choices"][0]["message"], Json::parse(R"({"role":"assistant","content":"é"})"));
}

TEST(ErrorBody, OpenAiShape) {
  EXPECT_EQ(Json::parse(error_body(400, "bad", "max_tokens")),
            Json::parse(R"({"error":{"code":400,"message":"bad","param":"max_tokens","type":"BadRequestError"}})"));
  EXPECT_EQ(Json::parse(error_body(503, "busy"))["error"]["param"], nullptr);
}

TEST(DumpJson, InvalidUtf8IsReplacedNotThrown) {
  EXPECT_EQ(dump_json(Json("a\xff")), "\"a\xEF\xBF\xBD\"");
}

}  // namespace
}  // namespace optimate::server
