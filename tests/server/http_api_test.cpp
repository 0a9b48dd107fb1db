// The HTTP front end end-to-end over loopback, against a scripted backend: framing, SSE
// format, errors and limits, disconnects.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <thread>

#include "fake_backend.h"
#include "harness.h"
#include "test_client.h"

namespace optimate::server {
namespace {

using testing::FakeBackend;
using testing::Harness;
using testing::TestClient;
using Json = nlohmann::json;
namespace http = boost::beast::http;

std::string raw_post(const std::string& body) {
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A client sends `bytes` (a request the held backend keeps queued), and leaves once the
// request is in the engine.
void send_then_leave(const Harness& h, const std::string& bytes) {
  TestClient c(h.port());
  c.send_raw(bytes);
  while (h.backend.num_unfinished() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  c.close();
}

std::vector<Json> sse_events(const std::string& body, bool* saw_done) {
  std::vector<Json> events;
  std::istringstream in(body);
  std::string line;
  *saw_done = false;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    EXPECT_EQ(line.rfind("data: ", 0), 0u) << line;
    std::string payload = line.substr(6);
    if (payload == "[DONE]") {
      *saw_done = true;
      continue;
    }
    EXPECT_FALSE(*saw_done) << "event after [DONE]";
    events.push_back(Json::parse(payload));
  }
  return events;
}

TEST(HttpApi, CompletionNonStreaming) {
  Harness h;
  TestClient c(h.port());
  auto r = c.post("/v1/completions", {{"model", "fake-model"}, {"prompt", "hi"}, {"max_tokens", 3}});
  ASSERT_EQ(r.status, 200) << r.body;
  Json j = r.json();
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "fake-model");
  EXPECT_EQ(j["choices"][0]["text"], "abc");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"], Json({{"prompt_tokens", 2}, {"completion_tokens", 3}, {"total_tokens", 5}}));
  // Keep-alive: a second request on the same connection.
  auto again = c.get("/v1/models");
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(again.json()["data"][0]["id"], "fake-model");
  EXPECT_EQ(again.json()["data"][0]["max_model_len"], 64);
}

// An engine may answer a request before submit returns (a refusal, a request finished at once):
// the stream's head and the output still reach the client in order, for every request.
TEST(HttpApi, AnAnswerGivenInsideSubmitStillStreams) {
  Harness h;
  h.backend.finish_in_submit(true);
  for (int i = 0; i < 20; ++i) {
    TestClient c(h.port());
    auto r = c.post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 1}, {"stream", true}});
    ASSERT_EQ(r.status, 200);
    bool done = false;
    const auto events = sse_events(r.body, &done);
    EXPECT_TRUE(done);
    ASSERT_EQ(events.size(), 1u) << r.body;
    EXPECT_EQ(events[0]["choices"][0]["text"], "a");
    EXPECT_EQ(events[0]["choices"][0]["finish_reason"], "length");
  }
}

TEST(HttpApi, ChatStreamingFollowsTheSseContract) {
  Harness h;
  TestClient c(h.port());
  auto r = c.post("/v1/chat/completions",
                  {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                   {"max_tokens", 3}, {"n", 2}, {"stream", true},
                   {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.message[http::field::content_type], "text/event-stream; charset=utf-8");
  bool done = false;
  auto events = sse_events(r.body, &done);
  EXPECT_TRUE(done);
  ASSERT_FALSE(events.empty());
  std::map<int, std::string> text;
  std::map<int, int> chunks;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const Json& e = events[i];
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    ASSERT_EQ(e["choices"].size(), 1u);
    const Json& choice = e["choices"][0];
    int index = choice["index"];
    if (chunks[index]++ == 0) {
      // The first chunk of a choice already carries text: no empty role-only chunk.
      EXPECT_EQ(choice["delta"]["role"], "assistant");
      EXPECT_FALSE(choice["delta"]["content"].get<std::string>().empty());
    } else {
      EXPECT_FALSE(choice["delta"].contains("role"));
    }
    if (choice["delta"].contains("content")) text[index] += choice["delta"]["content"];
    EXPECT_FALSE(e.contains("usage"));
  }
  EXPECT_EQ(text[0], "abc");
  EXPECT_EQ(text[1], "abc");
  const Json& last = events.back();
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], 6);
  EXPECT_EQ(last["usage"]["prompt_tokens"], Json(std::string("user: hi\nassistant: ").size()));
}

TEST(HttpApi, ErrorsAreOpenAiJsonWithTheRightStatus) {
  Harness h;
  TestClient c(h.port());
  auto bad_json = c.request(http::verb::post, "/v1/completions", "{\"prompt\": ");
  EXPECT_EQ(bad_json.status, 400);
  EXPECT_EQ(bad_json.json()["error"]["code"], 400);
  EXPECT_EQ(bad_json.json()["error"]["type"], "BadRequestError");

  auto wrong_type = c.post("/v1/completions", {{"prompt", "x"}, {"max_tokens", "five"}});
  EXPECT_EQ(wrong_type.status, 400);
  EXPECT_EQ(wrong_type.json()["error"]["param"], "max_tokens");

  auto unknown_model = c.post("/v1/completions", {{"model", "gpt-9"}, {"prompt", "x"}});
  EXPECT_EQ(unknown_model.status, 404);
  EXPECT_EQ(unknown_model.json()["error"]["message"], "The model `gpt-9` does not exist.");

  auto too_long = c.post("/v1/completions", {{"prompt", "hello"}, {"max_tokens", 100}});
  EXPECT_EQ(too_long.status, 400);
  EXPECT_EQ(too_long.json()["error"]["message"],
            "This model's maximum context length is 64 tokens. However, you requested 105 tokens "
            "(5 in the prompt, 100 in the completion). Please reduce the length of the prompt "
            "or completion.");

  auto invalid_utf8 = c.request(http::verb::post, "/v1/completions", "{\"prompt\": \"\xff\xfe\"}");
  EXPECT_EQ(invalid_utf8.status, 400);

  EXPECT_EQ(c.get("/nope").status, 404);
  EXPECT_EQ(c.get("/v1/completions").status, 405);
  EXPECT_EQ(c.get("/health").status, 200);  // the connection survived all of the above
}

TEST(HttpApi, ApiKeyGuardsAllButThePublicPaths) {
  Harness h("sekret");
  TestClient c(h.port());
  EXPECT_EQ(c.get("/v1/models").status, 401);
  EXPECT_EQ(c.get("/v1/models", "wrong").status, 401);
  EXPECT_EQ(c.get("/v1/models", "sekret").status, 200);
  EXPECT_EQ(c.post("/tokenize", {{"prompt", "x"}}).status, 401);
  EXPECT_EQ(c.post("/tokenize", {{"prompt", "x"}}, "sekret").status, 200);
  EXPECT_EQ(c.get("/health").status, 200);
  EXPECT_EQ(c.get("/metrics").status, 200);
  EXPECT_EQ(c.get("/healthz").status, 404);  // public means exactly those paths
  EXPECT_EQ(c.get("/nope").status, 404);     // an unknown path outside /v1/ is a 404 either way
}

// A client that asks before sending its body (curl does above 1 KiB) and lacks the key gets the
// 401 at once instead of "100 Continue": it uploads nothing. With the key it is asked for it.
TEST(HttpApi, ExpectContinueWithoutTheKeyIsRefusedBeforeTheBody) {
  Harness h("sekret");
  const std::string body = R"({"prompt": "hi", "max_tokens": 1, "user": ")" + std::string(4000, 'x') + R"("})";
  auto head = [&](const std::string& key) {
    return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           "Expect: 100-continue\r\nAuthorization: Bearer " + key + "\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n";
  };
  TestClient refused(h.port());
  refused.send_raw(head("wrong"));  // and no body
  const testing::Reply r = refused.read_reply();
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.message[boost::beast::http::field::connection], "close");

  TestClient allowed(h.port());
  allowed.send_raw(head("sekret"));
  const testing::Reply go_on = allowed.read_reply();
  EXPECT_EQ(go_on.status, 100);
  allowed.send_raw(body);
  EXPECT_EQ(allowed.read_reply().status, 200);
}

TEST(HttpApi, OversizedBodyGets413) {
  Harness h;
  TestClient c(h.port());
  std::string big(2u << 20, 'x');
  auto r = c.request(http::verb::post, "/v1/completions", "{\"prompt\": \"" + big + "\"}");
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(r.json()["error"]["code"], 413);
}

TEST(HttpApi, RequestThatNeverFinishesSendingGets408) {
  Harness h;
  TestClient c(h.port());
  c.send_raw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro");
  auto r = c.read_reply();
  EXPECT_EQ(r.status, 408);
  EXPECT_TRUE(c.closed_by_server());
}

TEST(HttpApi, IdleConnectionIsClosedQuietly) {
  Harness h;
  TestClient c(h.port());
  EXPECT_TRUE(c.closed_by_server());  // after read_timeout_s, without a response
}

TEST(HttpApi, FullQueueGets503WithRetryAfter) {
  Harness h({}, /*max_queued=*/1);
  h.backend.hold(true);
  TestClient first(h.port());
  first.send_raw(raw_post(R"({"prompt":"a","max_tokens":2})"));
  while (h.backend.num_waiting() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  TestClient second(h.port());
  auto r = second.post("/v1/completions", {{"prompt", "b"}});
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.message["Retry-After"], "1");
  h.backend.hold(false);
  EXPECT_EQ(first.read_reply().status, 200);
}

// A list of more prompts than the queue ever holds is a 400: a 503 would have a client that
// honours Retry-After retry it forever. As many as it holds go in.
TEST(HttpApi, MorePromptsThanTheQueueHoldsIs400) {
  Harness h({}, /*max_queued=*/2);
  TestClient c(h.port());
  auto r = c.post("/v1/completions", {{"prompt", {"a", "b", "c"}}, {"max_tokens", 2}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("3 prompts"), std::string::npos) << r.body;
  EXPECT_EQ(c.post("/v1/completions", {{"prompt", {"a", "b"}}, {"max_tokens", 2}}).status, 200);
}

// allowed_token_ids of only tokens that end the sequence with min_tokens: nothing could be
// drawn, so a 400 naming the field (the engine would have ended it as aborted).
TEST(HttpApi, AllowedTokensThatOnlyEndTheSequenceWithMinTokensIs400) {
  Harness h;
  TestClient c(h.port());
  auto r = c.post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 4}, {"min_tokens", 2},
                                      {"stop_token_ids", {7}}, {"allowed_token_ids", {0, 7}}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("allowed_token_ids"), std::string::npos) << r.body;
  EXPECT_EQ(c.post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 4}, {"min_tokens", 2},
                                       {"allowed_token_ids", {0, 5}}}).status, 200);
}

TEST(HttpApi, ClientDisconnectAbortsTheRequest) {
  Harness h;
  h.backend.hold(true);  // stays queued: only the socket can tell us the client left
  send_then_leave(h, raw_post(R"({"prompt":"a","max_tokens":20})"));
  EXPECT_TRUE(h.backend.wait_idle(std::chrono::seconds(5)));
  EXPECT_EQ(h.backend.aborted_ids().size(), 1u);
  EXPECT_EQ(h.server.active_exchanges(), 0);
}

// The same with more pipelined bytes behind the request than the server reads ahead (64 KiB):
// the hang-up is still seen, behind bytes nobody read.
TEST(HttpApi, ClientDisconnectAbortsTheRequestBehindPipelinedBytes) {
  Harness h;
  h.backend.hold(true);
  std::string pipelined;
  while (pipelined.size() < 100'000) pipelined += "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  send_then_leave(h, raw_post(R"({"prompt":"a","max_tokens":20})") + pipelined);
  EXPECT_TRUE(h.backend.wait_idle(std::chrono::seconds(30)));
  EXPECT_EQ(h.backend.aborted_ids().size(), 1u);
  EXPECT_EQ(h.server.active_exchanges(), 0);
}

// With a grammar already compiled, the request goes on at once: its abort on disconnect must
// still be the hook that stays (the compile's withdrawal is registered before it).
TEST(HttpApi, ClientDisconnectAbortsARequestWhoseGrammarWasCached) {
  Harness h;
  TestClient first(h.port());
  ASSERT_EQ(first.post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 2}, {"guided_regex", "a+"}}).status, 200);
  h.backend.hold(true);
  for (int i = 0; i < 10; ++i) {
    send_then_leave(h, raw_post(R"({"prompt":"a","max_tokens":20,"guided_regex":"a+"})"));
    EXPECT_TRUE(h.backend.wait_idle(std::chrono::seconds(30)));
    EXPECT_EQ(h.backend.aborted_ids().size(), static_cast<size_t>(i + 1));
  }
  EXPECT_EQ(h.backend.num_compiles(), 1);  // the others found it cached
}

TEST(HttpApi, PriorityReachesTheEngineAsTheClientSentIt) {
  Harness h;
  TestClient c(h.port());
  ASSERT_EQ(c.post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 1}, {"priority", -5}}).status, 200);
  EXPECT_EQ(h.backend.last_priority(), -5);
}

TEST(HttpApi, LowerFirstPrioritiesReachTheEngineInItsOrder) {
  // vLLM's clients: -5 is more important than 0, so the engine, where larger runs first, gets 5.
  Harness h;
  h.backend.set_priority_order(PriorityOrder::kLowerFirst);
  TestClient c(h.port());
  ASSERT_EQ(c.post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 1}, {"priority", -5}}).status, 200);
  EXPECT_EQ(h.backend.last_priority(), 5);
}

TEST(HttpApi, MetricsEndpointServesPrometheusText) {
  Harness h;
  TestClient c(h.port());
  ASSERT_EQ(c.post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 2}}).status, 200);
  auto r = c.get("/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.message[http::field::content_type], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(r.body.find("vllm:request_success_total{finished_reason=\"length\",model_name=\"fake-model\"} 1.0\n"),
            std::string::npos);
  EXPECT_NE(r.body.find("vllm:time_to_first_token_seconds_count{model_name=\"fake-model\"} 1.0\n"),
            std::string::npos);
}

TEST(HttpApi, DrainAnswersNewRequestsWith503AndFinishesRunningOnes) {
  Harness h;
  TestClient running(h.port());
  running.send_raw(raw_post(R"({"prompt":"a","max_tokens":20})"));
  TestClient other(h.port());
  while (h.backend.num_unfinished() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  h.server.begin_drain();
  auto r = running.read_reply();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.message[http::field::connection], "close");
  EXPECT_EQ(r.json()["choices"][0]["text"].get<std::string>().size(), 20u);
  EXPECT_TRUE(other.closed_by_server());
}

TEST(HttpApi, BatchedPromptsAnswerOneChoicePerPromptTimesN) {
  Harness h;
  TestClient c(h.port());
  auto r = c.post("/v1/completions", {{"prompt", {"ab", "cde"}}, {"max_tokens", 3}, {"n", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  ASSERT_EQ(j["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);  // prompt_index * n + i, in order
    EXPECT_EQ(j["choices"][i]["text"], "abc");
  }
  EXPECT_EQ(j["usage"], Json({{"prompt_tokens", 5}, {"completion_tokens", 12}, {"total_tokens", 17}}));
  // Each prompt went to the engine as it was written.
  const auto prompts = h.backend.submitted_prompts();
  ASSERT_EQ(prompts.size(), 2u);
  EXPECT_EQ(prompts[0], (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(prompts[1], (std::vector<int32_t>{'c', 'd', 'e'}));

  // Lists of token ids, streamed, with usage at the end.
  auto streamed = c.post("/v1/completions", {{"prompt", {{104, 105}, {106}}}, {"max_tokens", 2},
                                             {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(streamed.status, 200);
  bool done = false;
  const auto events = sse_events(streamed.body, &done);
  EXPECT_TRUE(done);
  std::map<int, std::string> text;
  std::set<std::string> ids;
  for (const Json& e : events) {
    ids.insert(e["id"].get<std::string>());
    for (const Json& choice : e["choices"]) text[choice["index"].get<int>()] += choice["text"].get<std::string>();
  }
  EXPECT_EQ(ids.size(), 1u);  // one response, whatever the number of prompts
  EXPECT_EQ(text, (std::map<int, std::string>{{0, "ab"}, {1, "ab"}}));
  EXPECT_EQ(events.back()["usage"], Json({{"prompt_tokens", 3}, {"completion_tokens", 4}, {"total_tokens", 7}}));
}

TEST(HttpApi, BadBatchesAreRefusedNamingThePrompt) {
  Harness h;
  TestClient c(h.port());
  for (const Json& prompt : {Json::array({"a", Json::array({1})}), Json::array({Json::array()}),
                             Json::array({Json::array({1}), "a"}), Json::array({Json::array({9999})})}) {
    auto r = c.post("/v1/completions", {{"prompt", prompt}});
    EXPECT_EQ(r.status, 400) << prompt.dump();
    EXPECT_EQ(r.json()["error"]["param"], "prompt") << prompt.dump();
  }
  auto too_many = c.post("/v1/completions", {{"prompt", Json(std::vector<std::string>(1025, "a"))}});
  EXPECT_EQ(too_many.status, 400);
  // One prompt of the batch too long for the context: the error names the prompt.
  auto too_long = c.post("/v1/completions", {{"prompt", {"a", std::string(70, 'x')}}});
  EXPECT_EQ(too_long.status, 400);
  EXPECT_EQ(too_long.json()["error"]["param"], "prompt");
  EXPECT_NE(too_long.json()["error"]["message"].get<std::string>().find("in the prompt"), std::string::npos);
  EXPECT_TRUE(h.backend.submitted_prompts().empty());  // nothing of a refused batch ran
}

TEST(HttpApi, ErrorTextKeepsWhatFollowsANul) {
  Harness h;
  TestClient c(h.port());
  auto r = c.post("/v1/completions", {{"model", std::string("gpt\0-4", 6)}, {"prompt", "x"}});
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.json()["error"]["message"], std::string("The model `gpt\0-4` does not exist.", 34));
}

TEST(HttpApi, BatchDisconnectAbortsEveryPrompt) {
  Harness h;
  h.backend.hold(true);
  {
    TestClient c(h.port());
    c.send_raw(raw_post(R"({"prompt":["a","b","c"],"max_tokens":20})"));
    while (h.backend.num_unfinished() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    c.close();
  }
  EXPECT_TRUE(h.backend.wait_idle(std::chrono::seconds(5)));
  EXPECT_EQ(h.backend.aborted_ids().size(), 3u);
}

}  // namespace
}  // namespace optimate::server
