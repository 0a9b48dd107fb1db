// What fleet routers call on a replica, in the shapes vllm-router 0.1.17 and sglang-router
// 0.3.2 parse (their sources: vllm-project/router src/routers/http/router.rs get_worker_load;
// sgl-model-gateway src/core/worker_manager.rs get_worker_load and
// src/core/steps/worker/local/discover_metadata.rs ServerInfo / ModelInfo).
#include <gtest/gtest.h>

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

TEST(FleetApi, GetLoadInBothRoutersConventions) {
  Harness h;
  h.backend.hold(true);  // requests stay queued, so the load is known exactly
  TestClient busy(h.port());
  busy.send_raw(raw_post("/v1/completions", R"({"prompt":"0123456789abcdefg","max_tokens":4,"n":2})"));
  while (h.backend.num_waiting() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));

  TestClient c(h.port());
  // vllm-router reads data["load"] as an integer: vLLM's server load, requests in flight (one
  // request, however many sequences it asks for). vLLM's own GET /load says the same.
  EXPECT_EQ(c.get("/get_load").json(), Json({{"load", 1}}));
  EXPECT_EQ(c.get("/get_load?format=vllm").json(), Json({{"load", 1}}));
  EXPECT_EQ(c.get("/load").json(), Json({{"server_load", 1}}));
  // sglang-router reads an array and sums num_tokens: as SGLang's scheduler counts them, the
  // KV tokens of running sequences plus the prompt tokens of waiting ones (two sequences of a
  // 17-token prompt).
  const Json sglang = c.get("/get_load?format=sglang").json();
  ASSERT_TRUE(sglang.is_array());
  ASSERT_EQ(sglang.size(), 1u);
  EXPECT_EQ(sglang[0], Json({{"dp_rank", 0}, {"num_reqs", 2}, {"num_waiting_reqs", 2}, {"num_tokens", 34}}));
  EXPECT_EQ(c.get("/get_load?format=tgi").status, 400);
  h.backend.hold(false);
  EXPECT_EQ(busy.read_reply().status, 200);
  // The count drops once the engine side lets the request go (right after its last output).
  for (int i = 0; i < 5000 && c.get("/load").json()["server_load"] != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(c.get("/load").json(), Json({{"server_load", 0}}));
}

TEST(FleetApi, GetLoadDefaultFollowsTheOperatorsChoice) {
  ApiOptions options;
  options.load_format = LoadFormat::kSglang;
  Harness h({}, options, Harness::options());
  TestClient c(h.port());
  EXPECT_TRUE(c.get("/get_load").json().is_array());
  EXPECT_TRUE(c.get("/get_load?format=vllm").json().is_object());
}

TEST(FleetApi, ServerAndModelInfoUnderBothNames) {
  Harness h;
  TestClient c(h.port());
  for (const char* path : {"/server_info", "/get_server_info"}) {
    const Json info = c.get(path).json();
    EXPECT_EQ(info["model_path"], "fake") << path;  // no absolute path leaves the server
    EXPECT_EQ(info["served_model_name"], "fake-model");
    EXPECT_EQ(info["version"], "9.9.9");
    EXPECT_EQ(info["max_model_len"], 64);
    EXPECT_EQ(info["max_total_num_tokens"], 1600);
    EXPECT_EQ(info["dp_size"], 1);
    // sglang-router would read a "model" key as model_id: there is none to clash with.
    EXPECT_FALSE(info.contains("model"));
    EXPECT_EQ(info["vllm_config"]["cache_config"]["block_size"], 16);
    EXPECT_EQ(info["vllm_config"]["model_config"]["model"], "fake");
  }
  for (const char* path : {"/model_info", "/get_model_info"}) {
    const Json info = c.get(path).json();
    EXPECT_EQ(info["model_path"], "fake") << path;  // no absolute path leaves the server
    EXPECT_EQ(info["tokenizer_path"], "fake");
    EXPECT_EQ(info["is_generation"], true);
    EXPECT_EQ(info["model_type"], "llama");
    EXPECT_EQ(info["architectures"], Json::array({"LlamaForCausalLM"}));
  }
}

TEST(FleetApi, FlushCacheAndResetPrefixCacheReachTheEngine) {
  Harness h;
  TestClient c(h.port());
  EXPECT_EQ(c.post("/flush_cache", Json::object()).status, 200);
  EXPECT_EQ(c.request(http::verb::post, "/reset_prefix_cache").status, 200);
  EXPECT_EQ(h.backend.num_prefix_cache_resets(), 2);
  EXPECT_EQ(c.get("/flush_cache").status, 405);
}

TEST(FleetApi, KvEventSourcesSayNoneArePublished) {
  Harness h;
  TestClient c(h.port());
  const auto r = c.get("/kv_event_sources");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.json(), Json::array());
}

TEST(FleetApi, HealthGenerateRunsOneToken) {
  Harness h;
  TestClient c(h.port());
  EXPECT_EQ(c.get("/health_generate").status, 200);
  ASSERT_EQ(h.backend.submitted_prompts().size(), 1u);
  EXPECT_TRUE(h.backend.wait_idle(std::chrono::seconds(5)));
}

TEST(FleetApi, RenderAnswersAsVllmDoes) {
  Harness h;
  TestClient c(h.port());
  // /v1/completions/render: a list, one GenerateRequest per prompt.
  const auto one = c.post("/v1/completions/render", {{"prompt", "hey"}, {"max_tokens", 3}});
  ASSERT_EQ(one.status, 200) << one.body;
  const Json list = one.json();
  ASSERT_TRUE(list.is_array());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["token_ids"], Json::array({'h', 'e', 'y'}));
  EXPECT_EQ(list[0]["sampling_params"]["max_tokens"], 3);
  EXPECT_EQ(list[0]["model"], "fake-model");
  EXPECT_TRUE(list[0]["request_id"].get<std::string>().starts_with("cmpl-"));
  const auto two = c.post("/v1/completions/render", {{"prompt", {"ab", "c"}}});
  ASSERT_EQ(two.json().size(), 2u);
  EXPECT_EQ(two.json()[1]["token_ids"], Json::array({'c'}));
  EXPECT_EQ(two.json()[1]["sampling_params"]["max_tokens"], 16);  // the completions default
  // /v1/chat/completions/render: one GenerateRequest.
  const auto chat = c.post("/v1/chat/completions/render",
                           {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}});
  ASSERT_EQ(chat.status, 200) << chat.body;
  const std::string rendered = "user: hi\nassistant: ";
  EXPECT_EQ(chat.json()["token_ids"].size(), rendered.size());
  EXPECT_TRUE(chat.json()["request_id"].get<std::string>().starts_with("chatcmpl-"));
  // Nothing was generated, and bad requests fail as the real endpoint would.
  EXPECT_TRUE(h.backend.submitted_prompts().empty());
  EXPECT_EQ(c.post("/v1/completions/render", {{"prompt", "x"}, {"max_tokens", 1000}}).status, 400);
}

TEST(FleetApi, RenderNeedsTheApiKeyLikeEveryV1Path) {
  Harness h("sekret");
  TestClient c(h.port());
  EXPECT_EQ(c.post("/v1/completions/render", {{"prompt", "x"}}).status, 401);
  EXPECT_EQ(c.post("/v1/completions/render", {{"prompt", "x"}}, "sekret").status, 200);
}

}  // namespace
}  // namespace optimate::server
