// What fleet routers call on a replica, in the shapes vllm-router and sglang-router parse:
// load reports, server and model metadata, prefix-cache flushes, a generating health check,
// and vLLM's render endpoints (the prompt's token ids, for cache-aware routing).
#include <filesystem>
#include <limits>
#include <mutex>

#include <fmt/format.h>

#include "server/api_error.h"
#include "server/client_json.h"
#include "server/serving_api.h"

namespace optimate::server {

namespace {

// A model's file or directory name: where it lies on this machine is not for clients.
std::string shown_path(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_filename()) p = p.parent_path();  // "dir/"
  return p.filename().string();
}

Json sampling_json(const SamplingParams& p) {
  return {{"n", p.n},
          {"temperature", p.temperature},
          {"top_p", p.top_p},
          {"top_k", p.top_k},
          {"min_p", p.min_p},
          {"presence_penalty", p.presence_penalty},
          {"frequency_penalty", p.frequency_penalty},
          {"repetition_penalty", p.repetition_penalty},
          {"seed", p.seed ? Json(*p.seed) : Json(nullptr)},
          {"stop", p.stop},
          {"stop_token_ids", p.stop_token_ids},
          {"ignore_eos", p.ignore_eos},
          {"max_tokens", p.max_tokens},
          {"min_tokens", p.min_tokens},
          {"logprobs", p.logprobs ? Json(*p.logprobs) : Json(nullptr)},
          {"include_stop_str_in_output", p.include_stop_str_in_output},
          {"skip_special_tokens", p.skip_special_tokens}};
}

// vLLM's GenerateRequest: what /v1/*/render return for each prompt.
Json generate_request_json(const std::string& request_id, const std::vector<int32_t>& ids,
                           const SamplingParams& params, const GenerationRequest& r,
                           const std::string& model) {
  Json stream_options = nullptr;
  if (r.stream)
    stream_options = {{"include_usage", r.include_usage},
                      {"continuous_usage_stats", r.continuous_usage_stats}};
  return {{"request_id", request_id}, {"token_ids", ids},
          {"features", nullptr},      {"sampling_params", sampling_json(params)},
          {"model", model},           {"stream", r.stream},
          {"stream_options", stream_options}, {"cache_salt", nullptr},
          {"priority", r.priority.value}, {"kv_transfer_params", nullptr}};
}

}  // namespace

void ServingApi::get_load(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange) {
  LoadFormat format = options_.load_format;
  if (auto asked = Router::query_param(request, "format")) {
    if (*asked == "vllm") format = LoadFormat::kVllm;
    else if (*asked == "sglang") format = LoadFormat::kSglang;
    else bad_request("format", "format must be vllm or sglang, got '{}'", *asked);
  }
  if (format == LoadFormat::kVllm) {
    // vLLM's server load: generation requests from arrival until the engine has finished them.
    exchange->send_json(200, dump_json({{"load", in_flight_->load()}}));
    return;
  }
  // SGLang's scheduler: the KV tokens held by running requests plus the tokens of every
  // waiting request. One entry per data-parallel rank; a replica is one rank.
  const LoadReport load = backend_.load();
  exchange->send_json(200, dump_json(Json::array({{{"dp_rank", 0},
                                                   {"num_reqs", load.num_running + load.num_waiting},
                                                   {"num_waiting_reqs", load.num_waiting},
                                                   {"num_tokens", load.kv_used_tokens + load.waiting_tokens}}})));
}

// vLLM's GET /load.
void ServingApi::server_load(const HttpRequest&, const std::shared_ptr<HttpExchange>& exchange) {
  exchange->send_json(200, dump_json({{"server_load", in_flight_->load()}}));
}

void ServingApi::server_info(const HttpRequest&, const std::shared_ptr<HttpExchange>& exchange) {
  const ModelInfo& m = backend_.model();
  // SGLang's names at the top level (sglang-router reads model_path and served_model_name),
  // vLLM's configuration sections under vllm_config (vllm-router reads the block size there).
  const std::string model_path = shown_path(m.model_path);
  const std::string tokenizer_path = shown_path(m.tokenizer_path);
  Json info = {
      {"model_path", model_path},
      {"tokenizer_path", tokenizer_path},
      {"served_model_name", m.id},
      {"version", options_.version},
      {"max_model_len", m.max_model_len},
      {"context_length", m.max_model_len},
      {"max_num_seqs", m.max_num_seqs},
      {"max_running_requests", m.max_num_seqs},
      {"max_num_batched_tokens", m.max_num_batched_tokens},
      {"max_prefill_tokens", m.max_num_batched_tokens},
      {"max_total_num_tokens", m.num_kv_blocks * m.block_size},
      {"block_size", m.block_size},
      {"dp_size", 1},
      {"vllm_config",
       {{"model_config",
         {{"model", model_path},
          {"tokenizer", tokenizer_path},
          {"served_model_name", m.id},
          {"max_model_len", m.max_model_len}}},
        {"cache_config", {{"block_size", m.block_size}, {"num_kv_blocks", m.num_kv_blocks}}},
        {"scheduler_config",
         {{"max_num_seqs", m.max_num_seqs}, {"max_num_batched_tokens", m.max_num_batched_tokens}}}}}};
  exchange->send_json(200, dump_json(info));
}

void ServingApi::model_info(const HttpRequest&, const std::shared_ptr<HttpExchange>& exchange) {
  const ModelInfo& m = backend_.model();
  exchange->send_json(200, dump_json({{"model_path", shown_path(m.model_path)},
                                      {"tokenizer_path", shown_path(m.tokenizer_path)},
                                      {"served_model_name", m.id},
                                      {"is_generation", true},
                                      {"model_type", m.model_type},
                                      {"architectures", m.architectures},
                                      {"max_model_len", m.max_model_len}}));
}

void ServingApi::flush_cache(const HttpRequest&, const std::shared_ptr<HttpExchange>& exchange) {
  backend_.reset_prefix_cache();
  exchange->send(200, "text/plain; charset=utf-8", "Cache flushed.\n");
}

// Healthy only if the engine generates: one greedy token of a short prompt, queued ahead of
// everything the priority optimizer orders. The caller's timeout bounds the wait.
void ServingApi::health_generate(const HttpRequest&, const std::shared_ptr<HttpExchange>& exchange) {
  if (!backend_.healthy()) throw ApiError(503, "The engine is not running.");
  BackendRequest request;
  request.request_id = random_request_id("health-");
  request.prompt_token_ids = backend_.tokenize("Hi", /*add_special_tokens=*/true);
  request.params.max_tokens = 1;
  request.params.temperature = 0.0f;
  request.params.ignore_eos = true;
  request.metadata.priority = EnginePriority::highest();
  const std::string id = request.request_id;
  auto answered = std::make_shared<std::once_flag>();
  backend_.submit(std::move(request), [exchange, answered](std::vector<GenerationOutput> outputs) {
    for (const auto& out : outputs) {
      if (!out.finished) continue;
      const bool generated = out.finish_reason != "abort";
      std::call_once(*answered, [&] {
        if (generated) exchange->send(200, "text/plain; charset=utf-8", "");
        else exchange->send_json(503, error_body(503, "The engine could not generate a token."));
      });
    }
  });
  exchange->on_disconnect([backend = &backend_, id] { backend->abort(id); });
}

void ServingApi::render_completion(const HttpRequest& http_request,
                                   const std::shared_ptr<HttpExchange>& exchange) {
  Json body = parse_json_body(http_request.body());
  CompletionRequest r = parse_completion_request(body, backend_.model().vocab_size);
  check_model(r.model);
  const std::vector<std::vector<int32_t>> prompts = completion_prompts(r);
  const std::string id = random_request_id("cmpl-");
  Json out = Json::array();
  for (size_t p = 0; p < prompts.size(); ++p) {
    const SamplingParams params =
        prompt_params(r, static_cast<int64_t>(prompts[p].size()), ApiKind::kCompletion);
    out.push_back(generate_request_json(prompts.size() == 1 ? id : fmt::format("{}-{}", id, p),
                                        prompts[p], params, r, backend_.model().id));
  }
  exchange->send_json(200, dump_json(out));
}

void ServingApi::render_chat(const HttpRequest& http_request,
                             const std::shared_ptr<HttpExchange>& exchange) {
  Json body = parse_json_body(http_request.body());
  ChatRequest r = parse_chat_request(body, backend_.model().vocab_size);
  check_model(r.model);
  const std::vector<int32_t> ids = chat_prompt(r);
  const SamplingParams params = prompt_params(r, static_cast<int64_t>(ids.size()), ApiKind::kChat);
  exchange->send_json(200, dump_json(generate_request_json(random_request_id("chatcmpl-"), ids,
                                                           params, r, backend_.model().id)));
}

}  // namespace optimate::server
