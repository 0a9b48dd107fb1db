// One request must never bring the server down: deeply nested JSON on every path that takes a
// schema or a JSON value is a 400 naming the field; grammars compile off the network threads
// (/health answers while a storm of compiles is outstanding, and a client that leaves drops
// its queued compile); integers past int64 and misnamed fields are refused by the name the
// client sent; the admin and cache paths need the API key; no absolute path leaves the server.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "fake_backend.h"
#include "harness.h"
#include "test_client.h"

namespace optimate::server {
namespace {

using testing::Harness;
using testing::raw_post;
using testing::TestClient;
using Json = nlohmann::json;
namespace http = boost::beast::http;

// Waits for a condition another thread brings about (never for a duration).
template <typename Condition>
bool eventually(Condition condition) {
  for (int i = 0; i < 20'000; ++i) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return condition();
}

// `n` clients, client i having sent request(i) (raw bytes); their replies are read later.
std::vector<std::unique_ptr<TestClient>> clients_sending(const Harness& h, int n,
                                                        const std::function<std::string(int)>& request) {
  std::vector<std::unique_ptr<TestClient>> clients;
  for (int i = 0; i < n; ++i) {
    clients.push_back(std::make_unique<TestClient>(h.port()));
    clients.back()->send_raw(request(i));
  }
  return clients;
}

const std::string kDeep = std::string(70'000, '[') + std::string(70'000, ']');

TEST(Robustness, DeepNestingOnEveryPathThatTakesJsonIsA400NamingTheField) {
  Harness h;
  const std::string chat = R"("messages": [{"role": "user", "content": "hi"}], "max_tokens": 2)";
  const std::string tool = R"({"type": "function", "function": {"name": "f", "parameters": )" + kDeep + "}}";
  struct Case {
    const char* target;
    std::string body;
    const char* param;
  };
  const std::vector<Case> cases = {
      {"/v1/chat/completions",
       "{" + chat + R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": )" + kDeep + "}}}",
       "response_format"},
      {"/v1/completions", R"({"prompt": "x", "guided_json": )" + Json(kDeep).dump() + "}", "guided_json"},
      {"/v1/completions", R"({"prompt": "x", "guided_json": )" + kDeep + "}", "guided_json"},
      {"/v1/chat/completions", "{" + chat + R"(, "structured_outputs": {"json": )" + kDeep + "}}", "structured_outputs"},
      {"/v1/chat/completions",
       "{" + chat + R"(, "response_format": {"type": "structural_tag", "format": {"type": "json_schema", "json_schema": )" +
           kDeep + "}}}",
       "response_format"},
      {"/v1/chat/completions", "{" + chat + R"(, "tools": [)" + tool + R"(], "tool_choice": "required"})", "tools"},
      {"/v1/chat/completions",
       "{" + chat + R"(, "tools": [)" + tool + R"(], "tool_choice": {"type": "function", "function": {"name": "f"}}})",
       "tools"},
      {"/v1/completions/render", R"({"prompt": "x", "guided_json": )" + kDeep + "}", "guided_json"},
      {"/v1/chat/completions/render", "{" + chat + R"(, "structured_outputs": {"json": )" + kDeep + "}}",
       "structured_outputs"},
      {"/tokenize", R"({"prompt": "x", "extra": )" + kDeep + "}", "extra"},
  };
  for (const Case& c : cases) {
    TestClient client(h.port());
    const auto r = client.request(http::verb::post, c.target, c.body);
    EXPECT_EQ(r.status, 400) << c.target << " " << c.param << ": " << r.body.substr(0, 300);
    if (r.status == 400) EXPECT_EQ(r.json()["error"]["param"], c.param) << r.body.substr(0, 300);
  }
  // Deep JSON given as text inside a field, and tool-call arguments in the history.
  TestClient client(h.port());
  Json arguments = {{"model", "fake-model"},
                    {"messages", {{{"role", "assistant"},
                                   {"tool_calls", {{{"id", "1"}, {"type", "function"},
                                                    {"function", {{"name", "f"}, {"arguments", kDeep}}}}}}},
                                  {{"role", "user"}, {"content", "hi"}}}}};
  EXPECT_EQ(client.post("/v1/chat/completions", arguments).status, 400);
  EXPECT_EQ(client.get("/health").status, 200);
  EXPECT_TRUE(h.backend.submitted_prompts().empty());
}

TEST(Robustness, HealthAnswersWhileACompileStormIsOutstanding) {
  Harness h;
  h.backend.hold_compiles(true);  // every grammar is slow to compile
  constexpr int kRequests = 6;
  std::vector<std::unique_ptr<TestClient>> storm;
  for (int i = 0; i < kRequests; ++i) {
    storm.push_back(std::make_unique<TestClient>(h.port()));
    storm.back()->send_raw(raw_post("/v1/completions", R"({"prompt": "x", "max_tokens": 2, "guided_regex": "a{)" +
                                                            std::to_string(i + 1) + R"(}"})"));
  }
  // Both compile threads are busy and the rest wait in the queue...
  ASSERT_TRUE(eventually([&] { return h.backend.num_compiling() == 2 && h.api.grammar_stats().queued == kRequests - 2; }));
  // ...and the network threads still answer everyone else.
  TestClient other(h.port());
  EXPECT_EQ(other.get("/health").status, 200);
  EXPECT_EQ(other.post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 2}}).status, 200);
  EXPECT_EQ(h.backend.num_compiling(), 2);  // answered while the compiles were outstanding
  EXPECT_EQ(h.api.grammar_stats().queued, kRequests - 2);
  h.backend.hold_compiles(false);
  for (auto& c : storm) EXPECT_EQ(c->read_reply().status, 200);
  EXPECT_EQ(h.backend.num_compiles(), kRequests);
}

// Admin requests wait for the engine to take their task between two steps: more of them than
// there are network threads, with the engine in a long step, leave /health and completions
// answering.
TEST(Robustness, HealthAnswersWhileAdminRequestsWaitForTheEngine) {
  Harness h;
  h.backend.hold_engine(true);
  const int kRequests = 2 * Harness::options().num_threads + 1;
  const auto admin = clients_sending(h, kRequests, [](int i) {
    return i % 2 ? raw_post("/flush_cache", "") : std::string("GET /v1/optimizers HTTP/1.1\r\nHost: x\r\n\r\n");
  });
  ASSERT_TRUE(eventually([&] { return h.backend.num_held_at_gates() >= Harness::options().num_threads; }));
  TestClient other(h.port());
  EXPECT_EQ(other.get("/health").status, 200);
  EXPECT_EQ(other.post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 2}}).status, 200);
  h.backend.hold_engine(false);
  for (auto& c : admin) EXPECT_EQ(c->read_reply().status, 200);
  EXPECT_EQ(h.backend.num_prefix_cache_resets(), kRequests / 2);
}

// Parsing and tokenizing run on request threads: with every one of them in a long tokenization
// (a prompt of megabytes), /health and the metrics still answer, and every request is then
// answered.
TEST(Robustness, HealthAnswersWhileEveryRequestThreadTokenizes) {
  Harness h;
  h.backend.hold_tokenizer(true);
  const int kRequests = 2 * Harness::options().num_threads + 1;
  const auto heavy = clients_sending(
      h, kRequests, [](int) { return raw_post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})"); });
  ASSERT_TRUE(eventually([&] { return h.backend.num_held_at_gates() == 2; }));  // both request threads
  TestClient other(h.port());
  EXPECT_EQ(other.get("/health").status, 200);
  EXPECT_EQ(other.get("/metrics").status, 200);
  h.backend.hold_tokenizer(false);
  for (auto& c : heavy) EXPECT_EQ(c->read_reply().status, 200);
}

TEST(Robustness, AClientThatLeavesDropsItsQueuedCompile) {
  Harness h;
  h.backend.hold_compiles(true);
  TestClient a(h.port()), b(h.port());
  a.send_raw(raw_post("/v1/completions", R"({"prompt": "x", "max_tokens": 2, "guided_regex": "a+"})"));
  b.send_raw(raw_post("/v1/completions", R"({"prompt": "x", "max_tokens": 2, "guided_regex": "b+"})"));
  ASSERT_TRUE(eventually([&] { return h.backend.num_compiling() == 2; }));
  {
    TestClient leaving(h.port());
    leaving.send_raw(raw_post("/v1/completions", R"({"prompt": "x", "max_tokens": 2, "guided_regex": "c+"})"));
    ASSERT_TRUE(eventually([&] { return h.api.grammar_stats().queued == 1; }));
  }  // closed before its grammar's turn
  ASSERT_TRUE(eventually([&] { return h.api.grammar_stats().dropped == 1; }));
  h.backend.hold_compiles(false);
  EXPECT_EQ(a.read_reply().status, 200);
  EXPECT_EQ(b.read_reply().status, 200);
  EXPECT_EQ(h.backend.num_compiles(), 2);  // "c+" was never compiled
  // A repeated grammar costs nothing: it comes from the cache.
  TestClient again(h.port());
  EXPECT_EQ(again.post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}, {"guided_regex", "a+"}}).status, 200);
  EXPECT_EQ(h.backend.num_compiles(), 2);
  // An error of the compile is answered after it, naming the field.
  const auto bad = again.post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}, {"guided_regex", "("}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.json()["error"]["param"], "guided_regex");
}

TEST(Robustness, IntegersPastInt64AreRefusedNotWrapped) {
  Harness h;
  TestClient c(h.port());
  for (const char* field : {"priority", "truncate_prompt_tokens", "seed", "max_tokens", "n"}) {
    // Past the top, and just below the bottom (a JSON parser reads that as a double that rounds
    // to int64's least value).
    for (const char* value : {"18446744073709551615", "-9223372036854775809"}) {
      const auto r = c.request(http::verb::post, "/v1/completions",
                               std::string(R"({"prompt": "hi", ")") + field + R"(": )" + value + "}");
      EXPECT_EQ(r.status, 400) << field << " " << value << ": " << r.body;
      EXPECT_EQ(r.json()["error"]["param"], field) << r.body;
    }
  }
  EXPECT_TRUE(h.backend.submitted_prompts().empty());
}

TEST(Robustness, ErrorsNameTheFieldTheClientSent) {
  Harness h;
  TestClient c(h.port());
  const Json messages = {{{"role", "user"}, {"content", "hi"}}};
  auto r = c.post("/v1/chat/completions", {{"messages", messages}, {"logprobs", true}, {"top_logprobs", 30}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["param"], "top_logprobs") << r.body;
  EXPECT_EQ(r.json()["error"]["message"].get<std::string>().rfind("top_logprobs", 0), 0u) << r.body;
  r = c.post("/v1/chat/completions", {{"messages", messages}, {"max_completion_tokens", 0}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["param"], "max_completion_tokens") << r.body;
  r = c.post("/v1/chat/completions", {{"messages", messages}, {"max_completion_tokens", 100000}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["param"], "max_completion_tokens") << r.body;
  // The plain names are still named as sent.
  r = c.post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 0}});
  EXPECT_EQ(r.json()["error"]["param"], "max_tokens") << r.body;
}

TEST(Robustness, WithAnApiKeyEveryAdminAndCachePathNeedsIt) {
  Harness h("sekret");
  TestClient c(h.port());
  for (const char* path : {"/flush_cache", "/reset_prefix_cache", "/v1/optimizers/rollback"})
    EXPECT_EQ(c.request(http::verb::post, path).status, 401) << path;
  for (const char* path : {"/server_info", "/model_info", "/health_generate", "/kv_event_sources", "/v1/optimizers"})
    EXPECT_EQ(c.get(path).status, 401) << path;
  EXPECT_EQ(c.post("/tokenize", {{"prompt", "x"}}).status, 401);
  // A web page's form post carries an Origin and no key: refused, whatever CORS allows.
  EXPECT_EQ(c.request_with(http::verb::post, "/flush_cache", {{"Origin", "https://evil.example"}}).status, 401);
  EXPECT_EQ(h.backend.num_prefix_cache_resets(), 0);
  EXPECT_EQ(c.request(http::verb::post, "/flush_cache", {}, "sekret").status, 200);
  EXPECT_EQ(c.request_with(http::verb::post, "/reset_prefix_cache", {{"Authorization", "bearer sekret"}}).status, 200);
  EXPECT_EQ(h.backend.num_prefix_cache_resets(), 2);
  // The public paths, as vLLM keeps them: health probes, load, version, metrics.
  for (const char* path : {"/health", "/ping", "/load", "/get_load", "/version", "/metrics"})
    EXPECT_EQ(c.get(path).status, 200) << path;
  EXPECT_EQ(c.post("/ping", Json::object()).status, 200);
}

TEST(Robustness, HistogramsOfEveryRequestPhaseAreObserved) {
  Harness h;
  TestClient c(h.port());
  ASSERT_EQ(c.post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 3}}).status, 200);
  const std::string text = c.get("/metrics").body;
  for (const char* name : {"vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds",
                           "vllm:request_decode_time_seconds", "vllm:request_inference_time_seconds",
                           "vllm:e2e_request_latency_seconds", "vllm:time_to_first_token_seconds"}) {
    const std::string count = std::string(name) + "_count{model_name=\"fake-model\"} 1";
    EXPECT_NE(text.find(count), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace optimate::server
