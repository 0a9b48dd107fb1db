// POST /v1/completions and POST /v1/chat/completions.
#include <chrono>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "server/api_error.h"
#include "server/serving_api.h"

namespace optimate::server {

namespace {

std::string random_hex(size_t num_chars) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string out;
  while (out.size() < num_chars) out += fmt::format("{:016x}", rng());
  out.resize(num_chars);
  return out;
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void ServingApi::check_model(const std::string& requested) const {
  if (!requested.empty() && requested != backend_.model().id)
    throw ApiError(404, fmt::format("The model `{}` does not exist.", requested), "model");
}

void ServingApi::check_queue() const {
  if (options_.max_num_queued_reqs >= 0 && backend_.num_waiting() >= options_.max_num_queued_reqs) {
    metrics_.record_rejected("queue_full");
    throw ApiError(503, fmt::format("The server is overloaded: {} requests are already queued "
                                    "(--max-num-queued-reqs). Retry later.",
                                    options_.max_num_queued_reqs))
        .with_retry_after(1);
  }
}

void ServingApi::start_generation(GenerationRequest& r, std::vector<int32_t> prompt_ids,
                                  ApiKind kind, bool want_logprobs,
                                  const std::shared_ptr<HttpExchange>& exchange) {
  const ModelInfo& model = backend_.model();
  resolve_max_tokens(r, static_cast<int64_t>(prompt_ids.size()), model.max_model_len,
                     kind == ApiKind::kChat ? std::numeric_limits<int64_t>::max() : 16);
  check_queue();

  ResponseMeta meta{(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-") + random_hex(32),
                    unix_seconds(), model.id};
  StreamSettings settings;
  settings.kind = kind;
  settings.stream = r.stream;
  settings.include_usage = r.include_usage;
  settings.continuous_usage_stats = r.continuous_usage_stats;
  settings.want_logprobs = want_logprobs;
  settings.n = r.params.n;
  settings.num_prompt_tokens = static_cast<int64_t>(prompt_ids.size());
  settings.max_tokens = r.params.max_tokens;
  settings.priority = r.priority;
  auto stream = std::make_shared<GenerationStream>(exchange, meta, settings, &metrics_, clock_);

  BackendRequest request;
  request.request_id = meta.id;
  request.prompt_token_ids = std::move(prompt_ids);
  request.params = r.params;
  request.priority = r.priority;  // the client's value: the engine knows its convention

  // Outputs arrive on the engine thread; formatting and writing happen on the connection's.
  backend_.submit(std::move(request), [stream, exchange](std::vector<GenerationOutput> outputs) {
    exchange->post([stream, outputs = std::move(outputs)] { stream->on_outputs(outputs); });
  });
  exchange->on_disconnect([backend = &backend_, id = meta.id] { backend->abort(id); });
  if (r.stream) exchange->start_events();
}

void ServingApi::completions(const HttpRequest& http_request,
                             const std::shared_ptr<HttpExchange>& exchange) {
  Json body = parse_json_body(http_request.body());
  CompletionRequest r = parse_completion_request(body, backend_.model().vocab_size);
  check_model(r.model);
  std::vector<int32_t> ids;
  if (auto* text = std::get_if<std::string>(&r.prompt)) ids = backend_.tokenize(*text, r.add_special_tokens);
  else ids = std::get<std::vector<int32_t>>(r.prompt);
  if (ids.empty()) bad_request("prompt", "prompt must not be empty");
  bool want_logprobs = r.params.logprobs.has_value();
  start_generation(r, std::move(ids), ApiKind::kCompletion, want_logprobs, exchange);
}

void ServingApi::chat_completions(const HttpRequest& http_request,
                                  const std::shared_ptr<HttpExchange>& exchange) {
  Json body = parse_json_body(http_request.body());
  ChatRequest r = parse_chat_request(body, backend_.model().vocab_size);
  check_model(r.model);
  std::string prompt = backend_.render_chat(r.messages, r.add_generation_prompt);
  std::vector<int32_t> ids = backend_.tokenize(prompt, r.add_special_tokens);
  if (ids.empty()) bad_request("messages", "the rendered conversation is empty");
  start_generation(r, std::move(ids), ApiKind::kChat, r.logprobs, exchange);
}

}  // namespace optimate::server
