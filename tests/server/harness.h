// The HTTP front end on an ephemeral loopback port over a FakeBackend: what HTTP tests (the
// server's and the benchmark client's) talk to.
#pragma once

#include <string>

#include "core/clock.h"
#include "fake_backend.h"
#include "server/http_server.h"
#include "server/serving_api.h"

namespace optimate::server::testing {

// The server is built first and destroyed last: whatever still holds a connection when the
// test ends (a grammar compile's waiter, a backend stream) lets go of it while the server's
// event loop, which the connection's timers belong to, still exists. Its threads stop first.
struct Harness {
  explicit Harness(std::string api_key = {}, int64_t max_queued = -1)
      : Harness(std::move(api_key), ApiOptions{max_queued, "9.9.9"}, options()) {}
  Harness(std::string api_key, ApiOptions api_options, HttpOptions http_options)
      : router(std::move(api_key)), server(std::move(http_options), router), metrics(registry, "fake-model", 64),
        api(backend, registry, metrics, clock, std::move(api_options)) {
    api.add_routes(router);
    server.start();
  }
  // A test that failed with a gate of the fake backend held lets its threads go first.
  ~Harness() {
    backend.hold_engine(false);
    backend.hold_tokenizer(false);
    backend.hold_compiles(false);
    server.stop();
  }
  static HttpOptions options() {
    HttpOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.max_body_bytes = 1 << 20;
    o.read_timeout_s = 0.5;
    return o;
  }
  uint16_t port() const { return server.port(); }

  Router router;
  HttpServer server;
  FakeBackend backend;
  SteadyClock clock;
  metrics::Registry registry;
  metrics::ServingMetrics metrics;
  ServingApi api;
};

}  // namespace optimate::server::testing
