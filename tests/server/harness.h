// The HTTP front end on an ephemeral loopback port over a FakeBackend: what HTTP tests (the
// server's and the benchmark client's) talk to.
#pragma once

#include <string>

#include "core/clock.h"
#include "fake_backend.h"
#include "server/http_server.h"
#include "server/serving_api.h"

namespace optimate::server::testing {

struct Harness {
  explicit Harness(std::string api_key = {}, int64_t max_queued = -1)
      : Harness(std::move(api_key), ApiOptions{max_queued, "9.9.9"}, options()) {}
  Harness(std::string api_key, ApiOptions api_options, HttpOptions http_options)
      : metrics(registry, "fake-model", 64), router(std::move(api_key)),
        api(backend, registry, metrics, clock, std::move(api_options)),
        server(std::move(http_options), router) {
    api.add_routes(router);
    server.start();
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

  FakeBackend backend;
  SteadyClock clock;
  metrics::Registry registry;
  metrics::ServingMetrics metrics;
  Router router;
  ServingApi api;
  HttpServer server;
};

}  // namespace optimate::server::testing
