// The HTTP API of `optimate serve`: OpenAI endpoints (serving_api_openai.cpp), the
// operational ones, /health, /metrics, /version, /tokenize, /detokenize, /v1/optimizers
// (serving_api_admin.cpp), and what fleet routers (vllm-router, sglang-router) call on a
// replica: /get_load, /server_info, /model_info, /flush_cache, /health_generate and the
// render endpoints (serving_api_fleet.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include <boost/asio/thread_pool.hpp>

#include "core/clock.h"
#include "metrics/registry.h"
#include "metrics/serving_metrics.h"
#include "server/generation_backend.h"
#include "server/generation_stream.h"
#include "server/grammar_pool.h"
#include "server/openai_request.h"
#include "server/request_id.h"
#include "server/router.h"

namespace optimate::server {

// The shape of GET /get_load. The routers send identical requests and parse incompatible
// answers, so the operator says which router a replica serves; ?format= overrides it.
enum class LoadFormat {
  kVllm,    // vllm-router: {"load": generation requests in flight}
  kSglang,  // sglang-router: [{"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens"}]
};

struct ApiOptions {
  int64_t max_num_queued_reqs = -1;  // < 0: unbounded; past it, 503 with Retry-After
  std::string version;
  LoadFormat load_format = LoadFormat::kVllm;
  GrammarPoolOptions grammar;  // structured outputs' compiles (--grammar-compile-*)
  // Threads that parse and tokenize requests (completions, chat, /tokenize, the render
  // endpoints), so the network threads only move bytes and answer the cheap paths.
  int64_t request_threads = 2;
};

class ServingApi {
 public:
  ServingApi(GenerationBackend& backend, metrics::Registry& registry,
             metrics::ServingMetrics& metrics, const Clock& clock, ApiOptions options);
  // Lets the request and engine-wait threads finish what they hold while every member exists.
  ~ServingApi();
  ServingApi(const ServingApi&) = delete;
  ServingApi& operator=(const ServingApi&) = delete;

  void add_routes(Router& router);
  // The grammar compiles' counters (tests, and what a slow structured request waits on).
  GrammarPool::Stats grammar_stats() const { return grammar_pool_.stats(); }

 private:
  struct Admission;
  void completions(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange,
                   const Admission& admission);
  void chat_completions(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange,
                        const Admission& admission);
  void models(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void health(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void metrics_text(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void version(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void tokenize(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void detokenize(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void list_optimizers(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void update_optimizer(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  // Fleet routers (serving_api_fleet.cpp).
  void get_load(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void server_load(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void server_info(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void model_info(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void flush_cache(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void health_generate(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void render_completion(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void render_chat(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void rollback_optimizers(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  void restore_optimizers(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);

  void check_model(const std::string& requested) const;
  // 503 with Retry-After when `num_new` more requests would pass --max-num-queued-reqs; 400 when
  // they are more than it allows at all.
  void check_queue(int64_t num_new = 1) const;
  // A text's token ids; 400 naming `field` for one past the model's vocabulary.
  std::vector<int32_t> text_tokens(std::string_view text, bool add_special_tokens, const char* field) const;
  // The token ids of each prompt of a completion request (none empty), truncated as asked.
  std::vector<std::vector<int32_t>> completion_prompts(const CompletionRequest& request) const;
  // The rendered conversation (tools shown, the final message left open when continued).
  std::string chat_text(const ChatRequest& request) const;
  std::vector<int32_t> chat_prompt(const ChatRequest& request) const;
  std::vector<int32_t> truncate_prompt(const GenerationRequest& request, std::vector<int32_t> ids) const;
  // Tokenizes bad_words into the request's params.
  void prepare_params(GenerationRequest& request) const;
  // Runs `next` once the request's grammar is compiled into its params: at once when it has
  // none, else on a request thread after the grammar pool is done (a disconnect first
  // withdraws the compile). Errors of the compile or of `next` are answered as route()'s are.
  void with_grammar(std::shared_ptr<GenerationRequest> request, const std::shared_ptr<HttpExchange>& exchange,
                    std::function<void()> next);
  // Counts a generation request in flight (vLLM's server load) while the token is held.
  std::shared_ptr<void> track_in_flight();
  // The request's sampling parameters for one prompt: max_tokens resolved, context checked,
  // n raised to best_of.
  SamplingParams prompt_params(const GenerationRequest& request, int64_t num_prompt_tokens,
                               ApiKind kind) const;
  // Submits one engine request per prompt and wires outputs and disconnects to the exchange.
  // `admission` is what the handler kept of the HTTP request.
  struct Admission {
    std::string client_request_id;  // the X-Request-Id header
    int64_t arrival_ns = 0;
    std::shared_ptr<void> in_flight;
  };
  void start_generation(const GenerationRequest& request, std::vector<std::vector<int32_t>> prompts,
                        StreamSettings settings, const Admission& admission,
                        const std::shared_ptr<HttpExchange>& exchange);
  Admission admit(const HttpRequest& http_request);
  // Runs `handler` on engine_waits_ rather than on the network thread: a handler that waits
  // for the engine to take its task between two steps (seconds apart when a step is long)
  // would hold a thread that /health and every other request need. Past
  // kMaxEngineWaits such requests at once, a 503 with Retry-After.
  void on_engine_wait_threads(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange,
                              Handler handler);
  static constexpr int64_t kMaxEngineWaits = 64;
  // Runs `handler` on request_work_: parsing and tokenizing a large body takes a network
  // thread for as long, and with it /health and every stream it writes. Past
  // kMaxQueuedBodyBytes of bodies waiting for a thread, a 503 with Retry-After.
  void on_request_threads(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange,
                          Handler handler);
  static constexpr int64_t kMaxQueuedBodyBytes = int64_t{256} << 20;

  GenerationBackend& backend_;
  metrics::Registry& registry_;
  metrics::ServingMetrics& metrics_;
  const Clock& clock_;
  ApiOptions options_;
  std::shared_ptr<std::atomic<int64_t>> in_flight_ = std::make_shared<std::atomic<int64_t>>(0);
  std::atomic<int64_t> num_engine_waits_{0};
  std::atomic<int64_t> queued_body_bytes_{0};
  boost::asio::thread_pool engine_waits_{4};
  boost::asio::thread_pool request_work_;
  // Last: destroyed first, so no compile's answer is posted to a request pool already gone.
  GrammarPool grammar_pool_;
};

}  // namespace optimate::server
