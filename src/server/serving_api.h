// The HTTP API of `optimate serve`: OpenAI endpoints (serving_api_openai.cpp) and the
// operational ones, /health, /metrics, /version, /tokenize, /detokenize, /v1/optimizers
// (serving_api_admin.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "core/clock.h"
#include "metrics/registry.h"
#include "metrics/serving_metrics.h"
#include "server/generation_backend.h"
#include "server/generation_stream.h"
#include "server/openai_request.h"
#include "server/router.h"

namespace optimate::server {

struct ApiOptions {
  int64_t max_num_queued_reqs = -1;  // < 0: unbounded; past it, 503 with Retry-After
  std::string version;
};

class ServingApi {
 public:
  ServingApi(GenerationBackend& backend, metrics::Registry& registry,
             metrics::ServingMetrics& metrics, const Clock& clock, ApiOptions options);

  void add_routes(Router& router);

 private:
  void completions(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void chat_completions(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void models(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void health(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void metrics_text(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void version(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void tokenize(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void detokenize(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void list_optimizers(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void update_optimizer(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);

  void check_model(const std::string& requested) const;
  void check_queue() const;
  // Submits and wires outputs and disconnects to the exchange.
  void start_generation(GenerationRequest& request, std::vector<int32_t> prompt_ids,
                        ApiKind kind, bool want_logprobs,
                        const std::shared_ptr<HttpExchange>& exchange);

  GenerationBackend& backend_;
  metrics::Registry& registry_;
  metrics::ServingMetrics& metrics_;
  const Clock& clock_;
  ApiOptions options_;
};

}  // namespace optimate::server
