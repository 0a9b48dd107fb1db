#include "bench/http_target.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/bench_clock.h"
#include "bench/completion_stream.h"
#include "bench/http_url.h"
#include "bench/keep_alive_connection.h"
#include "bench/server_resources.h"
#include "bench/step_profile_report.h"
#include "core/error.h"

namespace optimate::bench {
namespace {

namespace net = boost::asio;
namespace http = boost::beast::http;
using Clock = BenchClock;

// What every request of a run shares.
struct Server {
  std::string url;
  HttpUrl address;
  net::ip::tcp::resolver::results_type endpoints;
  std::string authorization;
  double timeout_s = 0.0;
};

HttpRequest make_request(http::verb verb, const std::string& path, const Server& server, std::string body) {
  HttpRequest req{verb, server.address.prefix + path, 11};
  req.set(http::field::host, server.address.host_header);
  req.set(http::field::user_agent, "optimate-bench");
  if (!server.authorization.empty()) req.set(http::field::authorization, server.authorization);
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  req.body() = std::move(body);
  req.keep_alive(true);
  req.prepare_payload();
  return req;
}

// Runs the coroutines spawned on `ioc` to the end; an exception escaping one is rethrown here.
void run_to_end(net::io_context& ioc) {
  ioc.run();
  ioc.restart();
}
auto rethrow = [](std::exception_ptr e) {
  if (e) std::rethrow_exception(e);
};

struct Reply {
  std::string transport_error;
  int status = 0;
  std::string body;
};

net::awaitable<void> fetch(const Server& server, const HttpRequest& request, Reply& reply) {
  KeepAliveConnection connection(co_await net::this_coro::executor, server.endpoints, server.timeout_s);
  ResponseSink sink{[&](int status) { reply.status = status; },
                    [&](std::string_view bytes) {
                      reply.body.append(bytes);
                      return true;
                    }};
  reply.transport_error = co_await connection.exchange(request, sink);
}

// GET /v1/models: proves the server answers before the clock starts, and names the model
// when none was given (the first listed, as vllm bench takes it).
std::string check_server(net::io_context& ioc, const Server& server, const std::string& model) {
  Reply reply;
  const HttpRequest request = make_request(http::verb::get, "/v1/models", server, "");
  net::co_spawn(ioc, fetch(server, request, reply), rethrow);
  run_to_end(ioc);
  if (!reply.transport_error.empty())
    fail(ErrorCode::kInvalidArgument, "cannot reach {}: {}", server.url, reply.transport_error);
  if (!model.empty()) return model;
  if (reply.status != 200)
    fail(ErrorCode::kInvalidArgument, "GET {}/v1/models answered HTTP {}: {}; name the model with "
         "--served-model-name (or pass --api-key)", server.url, reply.status, reply.body.substr(0, 300));
  const nlohmann::json j = nlohmann::json::parse(reply.body, nullptr, false);
  if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
      j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string())
    return j["data"][0]["id"].get<std::string>();
  fail(ErrorCode::kInvalidArgument, "GET {}/v1/models lists no model id; name it with --served-model-name",
       server.url);
}

// GET /metrics: the text, or nullopt and why in `unavailable`.
std::optional<std::string> fetch_metrics(net::io_context& ioc, const Server& server, std::string& unavailable) {
  Reply reply;
  const HttpRequest request = make_request(http::verb::get, "/metrics", server, "");
  net::co_spawn(ioc, fetch(server, request, reply), rethrow);
  run_to_end(ioc);
  if (!reply.transport_error.empty() || reply.status != 200) {
    unavailable = reply.transport_error.empty() ? fmt::format("GET /metrics answered HTTP {}", reply.status)
                                                : "GET /metrics: " + reply.transport_error;
    return std::nullopt;
  }
  return std::move(reply.body);
}

// The server's step-profile totals; nullopt, and why in `unavailable`, when it exports none (a
// server other than Optimate's).
std::optional<StepProfile> step_profile_of(const std::optional<std::string>& metrics, std::string& unavailable) {
  if (!metrics) return std::nullopt;
  bool found = false;
  StepProfile p = parse_step_profile(*metrics, found);
  if (!found) {
    unavailable = "the server's /metrics has no optimate:engine_step_phase_seconds (not an Optimate server)";
    return std::nullopt;
  }
  return p;
}

struct RunState {
  const Workload& workload;
  const Server& server;
  const std::string& model;
  const ProgressFn& progress;
  RunResult& run;
  Clock::time_point t0;
  std::vector<int64_t> follower;  // the next turn of each request (-1: none)
  std::vector<ResourceScrape> scrapes{};  // the server's resources during the run
  BenchTimer* poll_timer = nullptr;  // cancelled when the last request is done
  size_t num_independent = 0;     // requests sent at their arrival time; the rest follow one
  size_t next = 0;
  int64_t done = 0;

  double now_s() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }
};

// One connection's loop: takes the next request in arrival order, waits for its arrival time
// (0 for closed loop and offline workloads: at once), sends it and reads the stream; then, in
// a multi-turn workload, the conversation's later turns, each after its think time.
net::awaitable<void> worker(RunState& s) {
  const auto executor = co_await net::this_coro::executor;
  KeepAliveConnection connection(executor, s.server.endpoints, s.server.timeout_s);
  BenchTimer timer(executor);
  const auto& requests = s.workload.requests;
  while (s.next < s.num_independent) {
    const size_t first = s.next++;
    timer.expires_at(s.t0 + bench_seconds(requests[first].arrival_s));
    co_await timer.async_wait(net::use_awaitable);
    for (int64_t j = static_cast<int64_t>(first); j >= 0; j = s.follower[static_cast<size_t>(j)]) {
      const size_t i = static_cast<size_t>(j);
      const BenchRequest& br = requests[i];
      if (i != first) {
        timer.expires_after(bench_seconds(br.think_s));
        co_await timer.async_wait(net::use_awaitable);
      }
      const HttpRequest request = make_request(http::verb::post, "/v1/completions", s.server,
                                               completion_request_body(br, s.model, s.workload.spec.ignore_eos));
      RequestRecord& rec = s.run.records[i];
      rec.id = br.id;
      rec.priority = br.priority;
      rec.priority_class = br.priority_class;
      rec.prompt_tokens = br.prompt_len;
      rec.turn = br.turn;
      rec.arrival_s = s.now_s();
      CompletionStreamReader reader(rec, s.server.timeout_s);
      ResponseSink sink{[&](int status) { reader.on_status(status); },
                        [&](std::string_view bytes) { return reader.on_body(bytes, s.now_s()); }};
      const std::string error = co_await connection.exchange(request, sink);
      reader.finish(s.now_s(), error);
      ++s.done;
      if (s.progress) s.progress(s.done, static_cast<int64_t>(requests.size()), s.now_s());
      if (s.done == static_cast<int64_t>(requests.size()) && s.poll_timer) s.poll_timer->cancel();
    }
  }
}

// Reads the server's resources every `interval` until every request is done, on a connection of
// its own; a failed scrape is skipped.
net::awaitable<void> poll_resources(RunState& s, std::chrono::milliseconds interval) {
  BenchTimer timer(co_await net::this_coro::executor);
  s.poll_timer = &timer;
  const int64_t total = static_cast<int64_t>(s.workload.requests.size());
  const HttpRequest request = make_request(http::verb::get, "/metrics", s.server, "");
  while (s.done < total) {
    timer.expires_after(interval);
    boost::system::error_code ec;
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    if (s.done >= total) break;
    Reply reply;
    co_await fetch(s.server, request, reply);
    if (reply.transport_error.empty() && reply.status == 200)
      s.scrapes.push_back({s.now_s(), parse_server_resources(reply.body)});
  }
  s.poll_timer = nullptr;
}

int64_t num_connections(const Workload& workload, const HttpTargetOptions& options) {
  if (options.max_concurrency < 0)
    fail(ErrorCode::kInvalidArgument, "--max-concurrency must be >= 1, got {}", options.max_concurrency);
  const bool closed = workload.spec.arrival.kind == ArrivalKind::kClosedLoop;
  int64_t n = options.max_concurrency > 0 ? options.max_concurrency : kDefaultMaxConnections;
  if (closed) n = options.max_concurrency > 0 ? std::min(n, workload.spec.arrival.concurrency)
                                              : workload.spec.arrival.concurrency;
  return std::min<int64_t>(n, std::max<int64_t>(1, static_cast<int64_t>(num_independent(workload))));
}

}  // namespace

RunResult run_http(const std::string& url, const Workload& workload, const HttpTargetOptions& options,
                   const ProgressFn& progress) {
  // A day at most: its timers count nanoseconds in 64 bits.
  if (!(options.timeout_s > 0.0 && options.timeout_s <= 86400.0))
    fail(ErrorCode::kInvalidArgument, "--request-timeout must be in (0, 86400] seconds, got {}", options.timeout_s);
  const int64_t connections = num_connections(workload, options);
  Server server{url, parse_http_url(url), {}, {}, options.timeout_s};
  if (!options.api_key.empty()) server.authorization = "Bearer " + options.api_key;
  net::io_context ioc(1);
  boost::system::error_code ec;
  server.endpoints = net::ip::tcp::resolver(ioc).resolve(server.address.host, server.address.port, ec);
  if (ec) fail(ErrorCode::kInvalidArgument, "--url {}: cannot resolve {}: {}", url, server.address.host, ec.message());
  const std::string model = check_server(ioc, server, options.model);

  RunResult run;
  run.target = url;
  run.records.resize(workload.requests.size());
  std::string metrics_unavailable;
  const std::optional<std::string> metrics_before = fetch_metrics(ioc, server, metrics_unavailable);
  const std::optional<StepProfile> before = step_profile_of(metrics_before, run.step_profile_unavailable);
  RunState state{workload, server, model, progress, run, Clock::now(), followers(workload)};
  state.num_independent = num_independent(workload);
  for (int64_t c = 0; c < connections; ++c) net::co_spawn(ioc, worker(state), rethrow);
  if (metrics_before && options.resource_poll_ms > 0)
    net::co_spawn(ioc, poll_resources(state, std::chrono::milliseconds(options.resource_poll_ms)), rethrow);
  run_to_end(ioc);
  const double wall_s = state.now_s();
  const std::optional<std::string> metrics_after = fetch_metrics(ioc, server, metrics_unavailable);
  // Without the series before the run (an older server that creates them on its first step),
  // the totals after it are the run's when the server started fresh.
  if (const std::optional<StepProfile> after = step_profile_of(metrics_after, run.step_profile_unavailable)) {
    run.step_profile = before ? step_profile_delta(*after, *before) : *after;
    run.step_profile_unavailable.clear();
  } else if (!metrics_after) {
    run.step_profile_unavailable = metrics_unavailable;
  }
  if (metrics_before && metrics_after) {
    server_usage(parse_server_resources(*metrics_before), state.scrapes, parse_server_resources(*metrics_after),
                 wall_s, run.gpu, run.host);
  } else {
    run.gpu.unavailable = run.host.unavailable = metrics_unavailable;
  }
  return run;
}

}  // namespace optimate::bench
