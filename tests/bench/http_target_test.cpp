// The HTTP target against two servers on loopback: the project's own HTTP front end over a
// scripted backend (the SSE it really sends), and a raw server that fails on cue (HTTP errors,
// a cut stream, malformed events, silence), where every failure must be a failed record with
// its reason while the run goes on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "bench/bench_clock.h"
#include "bench/completion_stream.h"
#include "bench/http_target.h"
#include "bench/http_url.h"
#include "bench/sse_parser.h"
#include "core/error.h"
#include "metrics/registry.h"
#include "metrics/resource_metrics.h"
#include "metrics/step_profile_metrics.h"
#include "scripted_server.h"
#include "server/harness.h"

namespace optimate::bench {
namespace {

using testing::ScriptedServer;

Workload scripted_workload(const std::vector<std::string>& scripts, int64_t max_tokens, ArrivalKind kind,
                           int64_t concurrency = 1) {
  Workload w;
  w.spec.arrival.kind = kind;
  w.spec.arrival.concurrency = concurrency;
  for (size_t i = 0; i < scripts.size(); ++i) {
    BenchRequest r;
    r.id = "r" + std::to_string(i);
    r.prompt_text = scripts[i];
    r.max_tokens = max_tokens;
    r.priority_class = "p0";
    w.requests.push_back(r);
  }
  return w;
}

// Most requests in flight at once, from the records' send and finish times.
int64_t max_overlap(const RunResult& run) {
  int64_t most = 0;
  for (const auto& a : run.records) {
    int64_t n = 0;
    for (const auto& b : run.records) n += b.arrival_s <= a.arrival_s && a.arrival_s < b.finish_s;
    most = std::max(most, n);
  }
  return most;
}

void expect_ordered_times(const RequestRecord& r) {
  ASSERT_FALSE(r.token_times_s.empty()) << r.id;
  EXPECT_LE(r.arrival_s, r.first_token_s) << r.id;
  EXPECT_EQ(r.first_token_s, r.token_times_s.front()) << r.id;
  EXPECT_TRUE(std::is_sorted(r.token_times_s.begin(), r.token_times_s.end())) << r.id;
  EXPECT_LE(r.token_times_s.back(), r.finish_s) << r.id;
}

TEST(SseParser, SplitsEventsAcrossReadsAndLineEndings) {
  SseParser p;
  EXPECT_TRUE(p.feed("data: {\"a\"").empty());
  EXPECT_TRUE(p.mid_event());
  EXPECT_EQ(p.feed(":1}\r").size(), 0u);
  // The "\n" completing "\r\n" arrives in the next read: one line break, not two.
  EXPECT_EQ(p.feed("\n\r\n"), std::vector<std::string>{"{\"a\":1}"});
  EXPECT_EQ(p.feed(": keep-alive comment\n\nevent: x\ndata:two\ndata: lines\n\ndata: [DONE]\n\n"),
            (std::vector<std::string>{"two\nlines", "[DONE]"}));
  EXPECT_FALSE(p.mid_event());
}

// A server that streams one line without end stops the parser at its bound instead of taking
// the client's memory; events within the bound, and their data lines together, still pass.
TEST(SseParser, AnEventPastItsBoundStopsTheParser) {
  SseParser p(64);
  EXPECT_EQ(p.feed("data: " + std::string(50, 'a') + "\n\n"), std::vector<std::string>{std::string(50, 'a')});
  EXPECT_TRUE(p.feed("data: " + std::string(40, 'b') + "\ndata: " + std::string(30, 'c')).empty());
  EXPECT_TRUE(p.overflowed());
  EXPECT_TRUE(p.feed("\n\ndata: ok\n\n").empty());  // nothing more once stopped
}

TEST(HttpUrl, AcceptsRootAndBaseUrlRejectsTheRest) {
  EXPECT_EQ(parse_http_url("http://127.0.0.1:8000").port, "8000");
  EXPECT_EQ(parse_http_url("http://localhost:8000/v1/").prefix, "");
  EXPECT_EQ(parse_http_url("http://gw/llm/v1").prefix, "/llm");
  EXPECT_EQ(parse_http_url("http://gw/llm/v1").port, "80");
  EXPECT_EQ(parse_http_url("http://[::1]:9000").host, "::1");
  EXPECT_THROW(parse_http_url("https://api.example.com"), Error);
  EXPECT_THROW(parse_http_url("localhost:8000"), Error);
  EXPECT_THROW(parse_http_url("http://host:99999"), Error);
  EXPECT_THROW(parse_http_url("http://:80"), Error);
}

// Comments keep bytes coming but carry nothing: past the request timeout with no event the
// record fails and the connection is given up, as silence fails it (times here are the reader's
// arguments, not waited for).
TEST(CompletionStreamReader, BytesWithoutEventsPastTheTimeoutFailTheRequest) {
  RequestRecord rec;
  CompletionStreamReader reader(rec, 1.0);
  reader.on_status(200);
  EXPECT_TRUE(reader.on_body("data: {\"choices\": [{\"text\": \"a\"}]}\n\n", 0.0));
  EXPECT_TRUE(reader.on_body(": keep-alive\n", 0.9));
  EXPECT_TRUE(reader.on_body("data: {\"choices\": [{\"text\": \"b\"}]}\n\n", 1.5));  // an event: the clock restarts
  EXPECT_TRUE(reader.on_body(": keep-alive\n", 2.4));
  EXPECT_FALSE(reader.on_body(": keep-alive\n", 2.6));
  reader.finish(2.6, "");
  EXPECT_FALSE(rec.success);
  EXPECT_NE(rec.error.find("no event from the server for 1 s"), std::string::npos) << rec.error;
}

TEST(CompletionRequestBody, TokenIdsWhenKnownPriorityOnlyWhenSet) {
  BenchRequest r;
  r.prompt_token_ids = {5, 6, 7};
  r.max_tokens = 4;
  auto j = nlohmann::json::parse(completion_request_body(r, "m", true));
  EXPECT_EQ(j["prompt"], nlohmann::json({5, 6, 7}));
  EXPECT_EQ(j["max_tokens"], 4);
  EXPECT_EQ(j["temperature"], 0.0);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["stream_options"]["include_usage"], true);
  EXPECT_EQ(j["ignore_eos"], true);
  EXPECT_FALSE(j.contains("priority"));
  r.prompt_token_ids.clear();
  r.prompt_text = "hello";
  r.priority = 2;
  j = nlohmann::json::parse(completion_request_body(r, "m", false));
  EXPECT_EQ(j["prompt"], "hello");
  EXPECT_EQ(j["priority"], 2);
  EXPECT_FALSE(j.contains("ignore_eos"));
}

// The project's own server: every request recorded, token counts from its usage chunk.
TEST(HttpTarget, RecordsEveryRequestAgainstTheServer) {
  server::testing::Harness h;
  WorkloadSpec spec;
  spec.name = "http";
  spec.num_requests = 7;
  spec.arrival.kind = ArrivalKind::kClosedLoop;
  spec.arrival.concurrency = 3;
  spec.prompt = {.kind = LengthKind::kUniform, .min = 4, .max = 12};
  spec.output = {.kind = LengthKind::kUniform, .min = 2, .max = 6};
  spec.token_id_min = 1;  // the fake model's vocabulary is 256 bytes
  spec.token_id_max = 200;
  const Workload w = build_workload(spec);
  int64_t last_done = 0;
  const RunResult run = run_http("http://127.0.0.1:" + std::to_string(h.port()), w, {},
                                 [&](int64_t done, int64_t total, double) {
                                   EXPECT_EQ(done, last_done + 1);
                                   EXPECT_EQ(total, 7);
                                   last_done = done;
                                 });
  EXPECT_EQ(last_done, 7);
  ASSERT_EQ(run.records.size(), 7u);
  for (size_t i = 0; i < run.records.size(); ++i) {
    const RequestRecord& r = run.records[i];
    SCOPED_TRACE(r.id);
    EXPECT_TRUE(r.success) << r.error;
    EXPECT_EQ(r.id, w.requests[i].id);
    EXPECT_EQ(r.prompt_tokens, w.requests[i].prompt_len);
    EXPECT_EQ(r.output_tokens, w.requests[i].max_tokens);
    // The fake engine emits one letter per token, each in its own chunk.
    EXPECT_EQ(static_cast<int64_t>(r.token_times_s.size()), r.output_tokens);
    expect_ordered_times(r);
  }
  EXPECT_EQ(max_overlap(run), 3);
}

TEST(HttpTarget, ServerRejectionsAreFailedRecords) {
  server::testing::Harness h({}, /*max_queued=*/0);  // refuses every generation with 503
  WorkloadSpec spec;
  spec.num_requests = 3;
  spec.arrival.kind = ArrivalKind::kOffline;
  spec.prompt.value = 4;
  spec.output.value = 2;
  spec.token_id_max = spec.token_id_min = 100;
  const RunResult run = run_http("http://127.0.0.1:" + std::to_string(h.port()), build_workload(spec), {});
  ASSERT_EQ(run.records.size(), 3u);
  for (const RequestRecord& r : run.records) {
    EXPECT_FALSE(r.success);
    EXPECT_EQ(r.error.rfind("HTTP 503: ", 0), 0u) << r.error;
  }
}

TEST(HttpTarget, ApiKeyIsSentAndAWrongOneStopsTheRun) {
  server::testing::Harness h("sekret");
  WorkloadSpec spec;
  spec.num_requests = 1;
  spec.prompt.value = 4;
  spec.output.value = 2;
  spec.token_id_max = spec.token_id_min = 100;
  const Workload w = build_workload(spec);
  const std::string url = "http://127.0.0.1:" + std::to_string(h.port());
  HttpTargetOptions options;
  options.api_key = "sekret";
  EXPECT_TRUE(run_http(url, w, options).records[0].success);
  options.api_key = "wrong";
  try {
    run_http(url, w, options);
    ADD_FAILURE() << "a refused GET /v1/models must stop the run";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("HTTP 401"), std::string::npos) << e.what();
  }
}

TEST(HttpTarget, UnreachableServerIsAnError) {
  uint16_t port;
  {
    testing::net::io_context ioc;
    testing::tcp::acceptor bound(ioc, {testing::net::ip::make_address("127.0.0.1"), 0});
    port = bound.local_endpoint().port();
  }  // closed: nothing listens there now
  const Workload w = scripted_workload({"ok"}, 1, ArrivalKind::kOffline);
  EXPECT_THROW(run_http("http://127.0.0.1:" + std::to_string(port), w, {}), Error);
}

TEST(HttpTarget, EveryFailureIsARecordAndTheRunGoesOn) {
  ScriptedServer s;
  const std::vector<std::string> scripts = {"ok", "overloaded", "cut", "ok", "garbage", "no-usage",
                                            "no-done", "bad-request", "until-eof", "two-per-chunk", "ok"};
  HttpTargetOptions options;
  options.api_key = "k1";
  const RunResult run = run_http(s.url(), scripted_workload(scripts, 3, ArrivalKind::kClosedLoop), options);
  EXPECT_EQ(s.last_authorization(), "Bearer k1");
  ASSERT_EQ(run.records.size(), scripts.size());
  auto error = [&](size_t i) { return run.records[i].error; };
  auto starts = [&](size_t i, const std::string& prefix) {
    EXPECT_FALSE(run.records[i].success) << scripts[i];
    EXPECT_EQ(error(i).rfind(prefix, 0), 0u) << scripts[i] << ": " << error(i);
  };
  for (size_t i : {0u, 3u, 10u}) {
    EXPECT_TRUE(run.records[i].success) << error(i);
    EXPECT_EQ(run.records[i].output_tokens, 3);
    EXPECT_EQ(run.records[i].prompt_tokens, 3);
    EXPECT_EQ(run.records[i].token_times_s.size(), 3u);
    expect_ordered_times(run.records[i]);
  }
  starts(1, "HTTP 503: queue full");
  starts(2, "connection closed mid-response");
  EXPECT_NE(error(2).find("after 2 stream events"), std::string::npos) << error(2);
  starts(4, "malformed stream: an event is not a JSON object: {this is not json");
  starts(5, "no usage chunk");
  starts(6, "stream ended without data: [DONE]");
  starts(7, "HTTP 400: unknown script 'bad-request'");
  EXPECT_TRUE(run.records[8].success) << error(8);  // a body that ends when the server closes
  EXPECT_EQ(run.records[8].output_tokens, 2);
  // Tokens from usage; times per chunk with text (vllm bench's ITL).
  EXPECT_TRUE(run.records[9].success) << error(9);
  EXPECT_EQ(run.records[9].output_tokens, 6);
  EXPECT_EQ(run.records[9].token_times_s.size(), 3u);
  for (const RequestRecord& r : run.records) EXPECT_FALSE(std::isnan(r.finish_s)) << r.id;
}

TEST(HttpTarget, KeepsConnectionsAliveAndReplacesOnesTheServerClosed) {
  ScriptedServer s;
  const RunResult run = run_http(s.url(), scripted_workload({"ok", "ok", "ok", "ok"}, 2, ArrivalKind::kClosedLoop), {});
  for (const RequestRecord& r : run.records) EXPECT_TRUE(r.success) << r.error;
  // The GET /v1/models probe's, the GET /metrics scrapes' before and after the run, then one
  // for all four.
  EXPECT_EQ(s.connections_accepted(), 4);
  // A server that closes each connection after answering, without saying so: the next request
  // finds the connection dead before any reply and is sent again on a new one.
  ScriptedServer closing;
  const Workload w = scripted_workload({"ok-then-close", "ok-then-close", "ok"}, 2, ArrivalKind::kClosedLoop);
  const RunResult again = run_http(closing.url(), w, {});
  for (const RequestRecord& r : again.records) EXPECT_TRUE(r.success) << r.error;
  EXPECT_EQ(closing.completions_received(), 3);
}

TEST(HttpTarget, MaxConcurrencyBoundsRequestsInFlight) {
  ScriptedServer s;
  s.hold_until_in_flight = 2;  // a reply waits for a second request in flight (or the sixth)
  s.hold_until_received = 6;
  HttpTargetOptions options;
  options.max_concurrency = 2;
  const Workload w = scripted_workload(std::vector<std::string>(6, "ok"), 4, ArrivalKind::kOffline);
  const RunResult run = run_http(s.url(), w, options);
  for (const RequestRecord& r : run.records) EXPECT_TRUE(r.success) << r.error;
  EXPECT_EQ(s.max_active(), 2);
  EXPECT_EQ(s.connections_accepted(), 5);  // the probe's, the two /metrics scrapes', then two
}

// Arrivals a minute apart, on the client's clock: each finished request skips the clock a
// minute on, so the next arrival passes without being waited for.
TEST(HttpTarget, OpenLoopSendsNoRequestBeforeItsArrival) {
  ScriptedServer s;
  Workload w = scripted_workload({"ok", "ok", "ok"}, 1, ArrivalKind::kPoisson);
  w.requests[1].arrival_s = 60.0;
  w.requests[2].arrival_s = 120.0;
  std::vector<int64_t> received_when_done;
  const RunResult run = run_http(s.url(), w, {}, [&](int64_t, int64_t, double) {
    received_when_done.push_back(s.completions_received());
    BenchClock::skip(std::chrono::seconds(60));
  });
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(run.records[i].success) << run.records[i].error;
    EXPECT_GE(run.records[i].arrival_s, w.requests[i].arrival_s);
    EXPECT_LT(run.records[i].arrival_s, w.requests[i].arrival_s + 60.0);
  }
  // Each request had finished before the next was sent.
  EXPECT_EQ(received_when_done, (std::vector<int64_t>{1, 2, 3}));
}

// The server answers nothing; once it has the request, the client's clock skips past the
// timeout. The next request goes out, on a new connection, and is answered.
TEST(HttpTarget, ASilentServerTimesOut) {
  ScriptedServer s;
  s.on_stall = [] { BenchClock::skip(std::chrono::seconds(601)); };
  HttpTargetOptions options;
  options.timeout_s = 600.0;
  const RunResult run = run_http(s.url(), scripted_workload({"stall", "ok"}, 1, ArrivalKind::kClosedLoop), options);
  EXPECT_FALSE(run.records[0].success);
  EXPECT_EQ(run.records[0].error.rfind("no data from the server for 600 s", 0), 0u) << run.records[0].error;
  EXPECT_TRUE(run.records[1].success) << run.records[1].error;
}

// The same once the stream has begun: the server sends the head and one event, then nothing;
// it skips the clock past the timeout every 50 ms until the client gives up. (Which read the
// client was in when the clock passed its deadline depends on the threads' timing: not asserted.)
TEST(HttpTarget, AServerSilentMidStreamTimesOut) {
  ScriptedServer s;
  s.on_stall = [] { BenchClock::skip(std::chrono::seconds(601)); };
  HttpTargetOptions options;
  options.timeout_s = 600.0;
  const RunResult run =
      run_http(s.url(), scripted_workload({"ok", "head-then-stall"}, 1, ArrivalKind::kClosedLoop), options);
  EXPECT_TRUE(run.records[0].success) << run.records[0].error;
  EXPECT_FALSE(run.records[1].success);
  EXPECT_EQ(run.records[1].error.rfind("no data from the server for 600 s (reading the response", 0), 0u)
      << run.records[1].error;
}

// A connection left idle far past the timeout between requests is not cut: the timeout is the
// exchange's, not the connection's. One connection carries all three requests.
TEST(HttpTarget, AnIdleKeepAliveConnectionOutlivesTheTimeout) {
  ScriptedServer s;
  Workload w = scripted_workload({"ok", "ok", "ok"}, 1, ArrivalKind::kPoisson);
  w.requests[1].arrival_s = 10.0;
  w.requests[2].arrival_s = 20.0;
  HttpTargetOptions options;
  options.timeout_s = 1.0;
  options.max_concurrency = 1;
  const RunResult run = run_http(s.url(), w, options, [](int64_t, int64_t, double) {
    BenchClock::skip(std::chrono::seconds(10));
  });
  for (const RequestRecord& r : run.records) EXPECT_TRUE(r.success) << r.error;
  EXPECT_EQ(s.connections_accepted(), 4);  // the probe's, the two /metrics scrapes', the requests'
}

// An Optimate server's engine profile: the run's share is the difference of the scrapes before
// and after it; a server without the series (404 here, or another engine's /metrics) leaves the
// run without one, and says why.
TEST(HttpTarget, TakesTheEngineProfileFromTheServersMetrics) {
  ScriptedServer s;
  s.metrics = [](int64_t scrape) {
    metrics::Registry registry;
    metrics::StepProfileMetrics m(registry, "scripted-model");
    const double k = 1.0 + 2.0 * static_cast<double>(scrape);  // 1 before the run, 3 after
    m.set({{"forward", 4.0 * k}, {"update", 0.5 * k}}, {{"decode", static_cast<int64_t>(10 * k)}},
          {{"decode", 3.0 * k}}, {{"decode", static_cast<int64_t>(k)}}, {{{"decode", "attention"}, 0.25 * k}});
    return registry.render();
  };
  HttpTargetOptions before_and_after;  // two scrapes exactly: none between
  before_and_after.resource_poll_ms = 0;
  const RunResult run =
      run_http(s.url(), scripted_workload({"ok", "ok"}, 1, ArrivalKind::kClosedLoop), before_and_after);
  ASSERT_TRUE(run.step_profile.has_value()) << run.step_profile_unavailable;
  EXPECT_NEAR(run.step_profile->phase_seconds.at("forward"), 8.0, 1e-9);
  EXPECT_EQ(run.step_profile->steps.at("decode"), 20);
  EXPECT_NEAR(run.step_profile->device_seconds.at("decode"), 6.0, 1e-9);
  EXPECT_EQ(run.step_profile->staged_steps.at("decode"), 2);
  EXPECT_NEAR((run.step_profile->stage_seconds.at({"decode", "attention"})), 0.5, 1e-9);

  ScriptedServer other;
  const RunResult none = run_http(other.url(), scripted_workload({"ok"}, 1, ArrivalKind::kClosedLoop), {});
  EXPECT_FALSE(none.step_profile.has_value());
  EXPECT_EQ(none.step_profile_unavailable, "GET /metrics answered HTTP 404");
  EXPECT_EQ(none.gpu.unavailable, "GET /metrics answered HTTP 404");
  EXPECT_EQ(none.host.unavailable, "GET /metrics answered HTTP 404");
  EXPECT_TRUE(none.records[0].success);
}

// A GPU server's resources, as metrics::ResourceMetrics and StepProfileMetrics export them.
class FixedGpu final : public metrics::GpuProbe {
 public:
  std::string device() const override { return "NVIDIA H200"; }
  std::optional<metrics::GpuReading> read() override { return metrics::GpuReading{87.0, 120e9, 140e9}; }
};

TEST(HttpTarget, TakesTheServersResourcesFromItsMetrics) {
  ScriptedServer s;
  s.metrics = [](int64_t scrape) {
    metrics::Registry registry;
    metrics::StepProfileMetrics profile(registry, "m");
    const int64_t k = scrape == 0 ? 1 : 3;
    profile.set({{"forward", 2.0 * double(k)}}, {{"decode", k}}, {{"decode", 0.5 * double(k)}}, {}, {});
    metrics::ResourceMetrics resources(registry, "m", {"cuda", 16e9, 100e9}, std::make_unique<FixedGpu>());
    return registry.render();
  };
  HttpTargetOptions options;
  options.resource_poll_ms = 0;
  const RunResult run = run_http(s.url(), scripted_workload({"ok", "ok"}, 1, ArrivalKind::kClosedLoop), options);
  EXPECT_EQ(run.gpu.unavailable, "the server reads no NVML: its engine's busy time and allocations instead");
  EXPECT_DOUBLE_EQ(run.gpu.engine_memory_bytes, 116e9);
  ASSERT_TRUE(std::isfinite(run.gpu.engine_busy_pct));
  EXPECT_GT(run.gpu.engine_busy_pct, 0.0);  // 1 s of device time over the run's wall time
  EXPECT_TRUE(run.host.unavailable.empty()) << run.host.unavailable;
  EXPECT_GE(run.host.num_cpus, 1);
  EXPECT_GT(run.host.peak_resident_bytes, 0.0);
}


}  // namespace
}  // namespace optimate::bench
