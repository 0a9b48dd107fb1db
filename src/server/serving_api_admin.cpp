// Operational endpoints and the route table.
#include <algorithm>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "server/api_error.h"
#include "server/client_json.h"
#include "server/serving_api.h"

namespace optimate::server {

namespace http = boost::beast::http;

ServingApi::ServingApi(GenerationBackend& backend, metrics::Registry& registry,
                       metrics::ServingMetrics& metrics, const Clock& clock, ApiOptions options)
    : backend_(backend), registry_(registry), metrics_(metrics), clock_(clock),
      options_(std::move(options)),
      request_work_(static_cast<size_t>(std::max<int64_t>(1, options_.request_threads))),
      grammar_pool_([&backend](const structured::GrammarSpec& spec) { return backend.compile_grammar(spec); },
                    options_.grammar, clock) {}

ServingApi::~ServingApi() {
  request_work_.join();
  engine_waits_.join();
}

void ServingApi::add_routes(Router& router) {
  auto bind = [this](auto member) {
    return [this, member](const HttpRequest& r, const std::shared_ptr<HttpExchange>& e) {
      (this->*member)(r, e);
    };
  };
  // A handler run by `dispatch` (on_engine_wait_threads, on_request_threads) off the network thread.
  auto bind_on = [this, bind](auto dispatch, auto member) {
    return [this, bind, dispatch, member](const HttpRequest& r, const std::shared_ptr<HttpExchange>& e) {
      (this->*dispatch)(r, e, bind(member));
    };
  };
  auto bind_waiting = [&](auto member) { return bind_on(&ServingApi::on_engine_wait_threads, member); };
  auto bind_work = [&](auto member) { return bind_on(&ServingApi::on_request_threads, member); };
  // A generation request arrives, and counts as in flight, when its body is in: before it waits
  // for a request thread.
  auto bind_generation = [this](auto member) {
    return [this, member](const HttpRequest& r, const std::shared_ptr<HttpExchange>& e) {
      on_request_threads(r, e, [this, member, admission = admit(r)](const HttpRequest& r2,
                                                                   const std::shared_ptr<HttpExchange>& e2) {
        (this->*member)(r2, e2, admission);
      });
    };
  };
  router.add(http::verb::post, "/v1/completions", bind_generation(&ServingApi::completions));
  router.add(http::verb::post, "/v1/chat/completions", bind_generation(&ServingApi::chat_completions));
  router.add(http::verb::get, "/v1/models", bind(&ServingApi::models));
  router.add(http::verb::get, "/health", bind(&ServingApi::health));
  // vLLM's /ping (SageMaker's probe, GET and POST): /health's answer.
  router.add(http::verb::get, "/ping", bind(&ServingApi::health));
  router.add(http::verb::post, "/ping", bind(&ServingApi::health));
  router.add(http::verb::get, "/metrics", bind(&ServingApi::metrics_text));
  router.add(http::verb::get, "/version", bind(&ServingApi::version));
  router.add(http::verb::post, "/tokenize", bind_work(&ServingApi::tokenize));
  router.add(http::verb::post, "/detokenize", bind_work(&ServingApi::detokenize));
  router.add(http::verb::get, "/v1/optimizers", bind_waiting(&ServingApi::list_optimizers));
  router.add_prefix(http::verb::put, "/v1/optimizers/", bind_waiting(&ServingApi::update_optimizer));
  // Fleet routers: both vLLM's and SGLang's names where they differ.
  router.add(http::verb::get, "/get_load", bind(&ServingApi::get_load));
  router.add(http::verb::get, "/load", bind(&ServingApi::server_load));
  router.add(http::verb::get, "/server_info", bind(&ServingApi::server_info));
  router.add(http::verb::get, "/get_server_info", bind(&ServingApi::server_info));
  router.add(http::verb::get, "/model_info", bind(&ServingApi::model_info));
  router.add(http::verb::get, "/get_model_info", bind(&ServingApi::model_info));
  router.add(http::verb::post, "/flush_cache", bind_waiting(&ServingApi::flush_cache));
  router.add(http::verb::post, "/reset_prefix_cache", bind_waiting(&ServingApi::flush_cache));
  router.add(http::verb::get, "/health_generate", bind(&ServingApi::health_generate));
  router.add(http::verb::post, "/v1/completions/render", bind_work(&ServingApi::render_completion));
  router.add(http::verb::post, "/v1/chat/completions/render", bind_work(&ServingApi::render_chat));
  // vLLM's KV-event discovery (vllm-router's kv_aware policy asks every worker): this replica
  // publishes no KV-cache events, which vLLM answers with an empty list too.
  router.add(http::verb::get, "/kv_event_sources",
             [](const HttpRequest&, const std::shared_ptr<HttpExchange>& e) { e->send_json(200, "[]"); });
  router.add(http::verb::post, "/v1/optimizers/rollback", bind_waiting(&ServingApi::rollback_optimizers));
  router.add(http::verb::post, "/v1/optimizers/restore", bind_waiting(&ServingApi::restore_optimizers));
}

void ServingApi::models(const HttpRequest&, const std::shared_ptr<HttpExchange>& exchange) {
  const ModelInfo& m = backend_.model();
  Json card = {{"id", m.id},           {"object", "model"},       {"created", m.created},
               {"owned_by", "optimate"}, {"root", m.id},          {"parent", nullptr},
               {"max_model_len", m.max_model_len}, {"permission", Json::array()}};
  exchange->send_json(200, dump_json({{"object", "list"}, {"data", Json::array({card})}}));
}

void ServingApi::health(const HttpRequest&, const std::shared_ptr<HttpExchange>& exchange) {
  if (backend_.healthy()) exchange->send(200, "text/plain", "");
  else exchange->send_json(503, error_body(503, "The engine is not running."));
}

void ServingApi::metrics_text(const HttpRequest&, const std::shared_ptr<HttpExchange>& exchange) {
  const GrammarPool::Stats grammar = grammar_pool_.stats();
  metrics_.set_grammar_compiles(grammar.queued, grammar.running);
  exchange->send(200, metrics::Registry::kContentType, registry_.render());
}

void ServingApi::version(const HttpRequest&, const std::shared_ptr<HttpExchange>& exchange) {
  exchange->send_json(200, dump_json({{"version", options_.version}}));
}

// vLLM's /tokenize: {"prompt": "..."} or {"messages": [...]} -> ids and count.
void ServingApi::tokenize(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange) {
  Json body = parse_json_body(request.body());
  check_model(get_string(body, "model").value_or(""));
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    ChatRequest chat = parse_chat_request(body, backend_.model().vocab_size);
    bool add_special = get_bool(body, "add_special_tokens").value_or(false);
    ids = backend_.tokenize(chat_text(chat), add_special);
  } else {
    auto prompt = get_string(body, "prompt");
    if (!prompt) bad_request("prompt", "prompt (a string) or messages is required");
    ids = backend_.tokenize(*prompt, get_bool(body, "add_special_tokens").value_or(true));
  }
  Json token_strs = nullptr;
  if (get_bool(body, "return_token_strs").value_or(false)) {
    token_strs = Json::array();
    for (int32_t id : ids) token_strs.push_back(backend_.token_string(id));
  }
  exchange->send_json(200, dump_json({{"count", ids.size()},
                                      {"max_model_len", backend_.model().max_model_len},
                                      {"tokens", ids},
                                      {"token_strs", std::move(token_strs)}}));
}

void ServingApi::detokenize(const HttpRequest& request,
                            const std::shared_ptr<HttpExchange>& exchange) {
  Json body = parse_json_body(request.body());
  check_model(get_string(body, "model").value_or(""));
  auto tokens = get_int_list(body, "tokens");
  if (!tokens) bad_request("tokens", "tokens (a list of token ids) is required");
  std::vector<int32_t> ids;
  for (int64_t t : *tokens) {
    if (t < 0 || t >= backend_.model().vocab_size)
      bad_request("tokens", "token ids must be in [0, {}), got {}", backend_.model().vocab_size, t);
    ids.push_back(static_cast<int32_t>(t));
  }
  exchange->send_json(200, dump_json({{"prompt", backend_.detokenize(ids)}}));
}

namespace {

// What route() does for a handler on the network thread: its errors become the answer.
void run_answering_errors(const Handler& handler, const HttpRequest& request,
                          const std::shared_ptr<HttpExchange>& exchange) {
  try {
    handler(request, exchange);
  } catch (...) {
    send_exception(*exchange, std::current_exception(),
                   std::string(request.method_string()) + " " + Router::path_of(request));
  }
}

}  // namespace

void ServingApi::on_engine_wait_threads(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange,
                                        Handler handler) {
  if (num_engine_waits_.fetch_add(1) >= kMaxEngineWaits) {
    num_engine_waits_.fetch_sub(1);
    throw ApiError(503, fmt::format("{} requests already wait for the engine; retry shortly.", kMaxEngineWaits))
        .with_retry_after(1);
  }
  boost::asio::post(engine_waits_, [this, request = HttpRequest(request), exchange, handler = std::move(handler)] {
    run_answering_errors(handler, request, exchange);
    num_engine_waits_.fetch_sub(1);
  });
}

void ServingApi::on_request_threads(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange,
                                    Handler handler) {
  const int64_t bytes = static_cast<int64_t>(request.body().size());
  // One body larger than the bound on its own waits alone (--max-body-size bounds it).
  const int64_t queued = queued_body_bytes_.fetch_add(bytes);
  if (queued > 0 && queued + bytes > kMaxQueuedBodyBytes) {
    queued_body_bytes_.fetch_sub(bytes);
    throw ApiError(503, "The server is busy: too many request bytes wait to be read; retry shortly.")
        .with_retry_after(1);
  }
  boost::asio::post(request_work_, [this, bytes, request = HttpRequest(request), exchange,
                                    handler = std::move(handler)] {
    queued_body_bytes_.fetch_sub(bytes);
    run_answering_errors(handler, request, exchange);
  });
}

void ServingApi::list_optimizers(const HttpRequest&, const std::shared_ptr<HttpExchange>& exchange) {
  Json body = {{"object", "list"}, {"data", backend_.list_optimizers()}};
  if (Json config = backend_.config_status(); !config.is_null()) body["config"] = std::move(config);
  exchange->send_json(200, dump_json(body));
}

void ServingApi::rollback_optimizers(const HttpRequest&, const std::shared_ptr<HttpExchange>& exchange) {
  Json result = backend_.rollback_optimizers();
  metrics_.record_optimizer_event("all", "rollback");
  exchange->send_json(200, dump_json(result));
}

void ServingApi::restore_optimizers(const HttpRequest&, const std::shared_ptr<HttpExchange>& exchange) {
  Json result = backend_.restore_optimizers();
  metrics_.record_optimizer_event("all", "restore");
  exchange->send_json(200, dump_json(result));
}

void ServingApi::update_optimizer(const HttpRequest& request,
                                  const std::shared_ptr<HttpExchange>& exchange) {
  std::string name = Router::path_of(request).substr(std::string_view("/v1/optimizers/").size());
  Json body = parse_json_body(request.body());
  Json result = backend_.update_optimizer(name, body);
  metrics_.record_optimizer_event(name, "update");
  exchange->send_json(200, dump_json(result));
}

}  // namespace optimate::server
