// POST /v1/completions and POST /v1/chat/completions.
#include <chrono>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "server/api_error.h"
#include "server/serving_api.h"

namespace optimate::server {

std::string random_request_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string out(prefix);
  for (int i = 0; i < 2; ++i) out += fmt::format("{:016x}", rng());
  return out;
}

namespace {

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

void ServingApi::check_queue(int64_t num_new) const {
  if (options_.max_num_queued_reqs >= 0 &&
      backend_.num_waiting() + num_new > options_.max_num_queued_reqs) {
    metrics_.record_rejected("queue_full");
    throw ApiError(503, fmt::format("The server is overloaded: {} requests are already queued "
                                    "(--max-num-queued-reqs). Retry later.",
                                    options_.max_num_queued_reqs))
        .with_retry_after(1);
  }
}

std::vector<std::vector<int32_t>> ServingApi::completion_prompts(const CompletionRequest& r) const {
  std::vector<std::vector<int32_t>> out;
  out.reserve(r.prompts.size());
  for (const Prompt& p : r.prompts) {
    if (const auto* text = std::get_if<std::string>(&p)) out.push_back(backend_.tokenize(*text, r.add_special_tokens));
    else out.push_back(std::get<std::vector<int32_t>>(p));
    if (out.back().empty()) bad_request("prompt", "prompt must not be empty");
  }
  return out;
}

std::vector<int32_t> ServingApi::chat_prompt(const ChatRequest& r) const {
  std::vector<int32_t> ids =
      backend_.tokenize(backend_.render_chat(r.messages, r.add_generation_prompt), r.add_special_tokens);
  if (ids.empty()) bad_request("messages", "the rendered conversation is empty");
  return ids;
}

SamplingParams ServingApi::prompt_params(const GenerationRequest& request, int64_t num_prompt_tokens,
                                         ApiKind kind) const {
  GenerationRequest r = request;
  if (kind == ApiKind::kChat)
    resolve_max_tokens(r, num_prompt_tokens, backend_.model().max_model_len,
                       std::numeric_limits<int64_t>::max(), "messages");
  else
    resolve_max_tokens(r, num_prompt_tokens, backend_.model().max_model_len, 16, "prompt");
  return r.params;
}

void ServingApi::start_generation(const GenerationRequest& r,
                                  std::vector<std::vector<int32_t>> prompts, ApiKind kind,
                                  bool want_logprobs, const std::shared_ptr<HttpExchange>& exchange) {
  std::vector<SamplingParams> params;
  for (const auto& ids : prompts) params.push_back(prompt_params(r, static_cast<int64_t>(ids.size()), kind));
  check_queue(static_cast<int64_t>(prompts.size()));

  const int64_t priority = r.priority;  // the client's value: the engine knows its convention
  ResponseMeta meta{random_request_id(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-"),
                    unix_seconds(), backend_.model().id};
  StreamSettings settings;
  settings.kind = kind;
  settings.stream = r.stream;
  settings.include_usage = r.include_usage;
  settings.continuous_usage_stats = r.continuous_usage_stats;
  settings.want_logprobs = want_logprobs;
  settings.n = r.params.n;
  for (const auto& ids : prompts) settings.num_prompt_tokens.push_back(static_cast<int64_t>(ids.size()));
  settings.max_tokens = params.front().max_tokens;
  settings.priority = priority;
  auto stream = std::make_shared<GenerationStream>(exchange, meta, settings, &metrics_, clock_);

  // One engine request per prompt; prompt p's choices are p * n .. p * n + n - 1.
  std::vector<std::string> ids;
  try {
    for (size_t p = 0; p < prompts.size(); ++p) {
      BackendRequest request;
      request.request_id = prompts.size() == 1 ? meta.id : fmt::format("{}-{}", meta.id, p);
      request.prompt_token_ids = std::move(prompts[p]);
      request.params = params[p];
      request.priority = priority;
      ids.push_back(request.request_id);
      const int64_t first_choice = static_cast<int64_t>(p) * r.params.n;
      // Outputs arrive on the engine thread; formatting and writing happen on the connection's.
      backend_.submit(std::move(request), [stream, exchange, first_choice](std::vector<GenerationOutput> outputs) {
        for (auto& out : outputs) out.index += first_choice;
        exchange->post([stream, outputs = std::move(outputs)] { stream->on_outputs(outputs); });
      });
    }
  } catch (...) {
    ids.pop_back();  // the one refused
    for (const auto& id : ids) backend_.abort(id);
    throw;
  }
  exchange->on_disconnect([backend = &backend_, ids] {
    for (const auto& id : ids) backend->abort(id);
  });
  if (r.stream) exchange->start_events();
}

void ServingApi::completions(const HttpRequest& http_request,
                             const std::shared_ptr<HttpExchange>& exchange) {
  Json body = parse_json_body(http_request.body());
  CompletionRequest r = parse_completion_request(body, backend_.model().vocab_size);
  check_model(r.model);
  const bool want_logprobs = r.params.logprobs.has_value();
  start_generation(r, completion_prompts(r), ApiKind::kCompletion, want_logprobs, exchange);
}

void ServingApi::chat_completions(const HttpRequest& http_request,
                                  const std::shared_ptr<HttpExchange>& exchange) {
  Json body = parse_json_body(http_request.body());
  ChatRequest r = parse_chat_request(body, backend_.model().vocab_size);
  check_model(r.model);
  start_generation(r, {chat_prompt(r)}, ApiKind::kChat, r.logprobs, exchange);
}

}  // namespace optimate::server
