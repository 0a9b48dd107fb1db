// The sampling fields both OpenAI endpoints accept, and the context-length check.
#include "server/openai_request.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "server/api_error.h"

namespace optimate::server {

namespace {

float to_float(double v) { return static_cast<float>(v); }

int64_t saturating_add(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}

// logit_bias, allowed_token_ids and bad_words (the last tokenized later, by the server).
void parse_token_controls(const Json& body, GenerationRequest& r, int64_t vocab_size) {
  SamplingParams& p = r.params;
  if (const Json* bias = get_object(body, "logit_bias")) {
    for (const auto& [key, value] : bias->items()) {
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(key, &used);
        if (used != key.size()) id = -1;
      } catch (const std::exception&) {
      }
      if (id < 0 || id >= vocab_size)
        bad_request("logit_bias", "logit_bias keys must be token ids in [0, {}), got '{}'", vocab_size, key);
      // vLLM clamps a bias to [-100, 100] rather than refusing it.
      const double bias = std::clamp(as_number(value, "logit_bias"), -100.0, 100.0);
      p.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
    }
  }
  if (auto ids = get_int_list(body, "allowed_token_ids")) {
    if (ids->empty()) bad_request("allowed_token_ids", "allowed_token_ids must not be empty");
    for (int64_t id : *ids) {
      if (id < 0 || id >= vocab_size)
        bad_request("allowed_token_ids", "allowed_token_ids must be token ids in [0, {}), got {}", vocab_size, id);
      p.allowed_token_ids.push_back(static_cast<int32_t>(id));
    }
  }
  if (body.contains("bad_words") && !body["bad_words"].is_null()) {
    const Json& words = body["bad_words"];
    if (!words.is_array()) bad_request("bad_words", "bad_words must be a list of strings");
    for (const auto& w : words) {
      if (!w.is_string() || w.get<std::string>().empty())
        bad_request("bad_words", "bad_words must be a list of non-empty strings");
      r.bad_words.push_back(w.get<std::string>());
    }
  }
}

}  // namespace

void parse_generation_fields(const Json& body, GenerationRequest& r, int64_t vocab_size) {
  if (auto model = get_string(body, "model")) r.model = *model;
  SamplingParams& p = r.params;
  if (auto v = get_int(body, "n")) p.n = *v;
  if (auto v = get_number(body, "temperature")) p.temperature = to_float(*v);
  if (auto v = get_number(body, "top_p")) p.top_p = to_float(*v);
  if (auto v = get_int(body, "top_k")) p.top_k = *v;
  if (auto v = get_number(body, "min_p")) p.min_p = to_float(*v);
  if (auto v = get_number(body, "repetition_penalty")) p.repetition_penalty = to_float(*v);
  if (auto v = get_number(body, "presence_penalty")) p.presence_penalty = to_float(*v);
  if (auto v = get_number(body, "frequency_penalty")) p.frequency_penalty = to_float(*v);
  if (auto v = get_int(body, "seed")) p.seed = static_cast<uint64_t>(*v);
  if (auto v = get_bool(body, "ignore_eos")) p.ignore_eos = *v;
  if (auto v = get_int(body, "min_tokens")) p.min_tokens = *v;
  p.stop = get_string_or_strings(body, "stop");
  // Any integer, as vLLM takes them: an id outside the vocabulary can never be drawn, so it stops
  // nothing and is dropped.
  if (auto ids = get_int_list(body, "stop_token_ids"))
    for (int64_t id : *ids)
      if (id >= 0 && id < vocab_size) p.stop_token_ids.push_back(id);
  if (auto v = get_bool(body, "include_stop_str_in_output")) p.include_stop_str_in_output = *v;
  if (auto v = get_bool(body, "skip_special_tokens")) p.skip_special_tokens = *v;
  if (auto v = get_bool(body, "spaces_between_special_tokens")) p.spaces_between_special_tokens = *v;
  if (auto v = get_int(body, "priority")) r.priority = ClientPriority{*v};
  if (auto v = get_bool(body, "add_special_tokens")) r.add_special_tokens = *v;

  parse_token_controls(body, r, vocab_size);
  r.best_of = get_int(body, "best_of");
  if (r.best_of && (*r.best_of < p.n || *r.best_of > 128))
    bad_request("best_of", "best_of must be in [n, 128] (n = {}), got {}", p.n, *r.best_of);
  if (auto id = get_string(body, "request_id")) r.request_id = *id;
  r.truncate_prompt_tokens = get_int(body, "truncate_prompt_tokens");
  if (r.truncate_prompt_tokens && *r.truncate_prompt_tokens < 1 && *r.truncate_prompt_tokens != -1)
    bad_request("truncate_prompt_tokens", "truncate_prompt_tokens must be at least 1 (or -1: the context length), got {}",
                *r.truncate_prompt_tokens);
  if (auto side = get_string(body, "truncation_side")) {
    if (*side != "left" && *side != "right")
      bad_request("truncation_side", "truncation_side must be 'left' or 'right', got '{}'", *side);
    r.truncate_left = *side == "left";
  }
  r.return_tokens_as_token_ids = get_bool(body, "return_tokens_as_token_ids").value_or(false);
  r.return_token_ids = get_bool(body, "return_token_ids").value_or(false);
  if (auto v = get_int(body, "prompt_logprobs")) p.prompt_logprobs = *v;
  r.grammar = parse_structured_outputs(body);
  refuse_unbuilt_fields(body);

  r.stream = get_bool(body, "stream").value_or(false);
  if (const Json* options = get_object(body, "stream_options")) {
    if (!r.stream && !options->empty())  // vLLM lets an empty object pass
      bad_request("stream_options", "Stream options can only be defined when `stream=True`.");
    r.include_usage = get_bool(*options, "include_usage").value_or(false);
    r.continuous_usage_stats = get_bool(*options, "continuous_usage_stats").value_or(false);
  }
  if (r.stream && p.prompt_logprobs)
    bad_request("prompt_logprobs", "`prompt_logprobs` are not available when `stream=True`.");
  if (r.stream && r.best_of && *r.best_of != p.n)
    bad_request("best_of", "best_of must equal n when streaming (the best choices are known only at the end)");
}

void validate_sampling(const GenerationRequest& r) {
  try {
    SamplingParams check = r.params;
    check.max_tokens = r.max_tokens.value_or(1);
    if (!r.max_tokens) check.min_tokens = std::min<int64_t>(check.min_tokens, check.max_tokens);
    check.validate();
  } catch (const Error& e) {
    std::string message = e.what();
    std::string param = message.substr(0, message.find(' '));
    // SamplingParams names its own fields; the client may have sent them under other names.
    const std::string& sent = param == "max_tokens" ? r.max_tokens_field : param == "logprobs" ? r.logprobs_field : param;
    if (sent != param) message = sent + message.substr(param.size());
    throw ApiError(400, message, sent);
  }
  if (r.max_tokens && *r.max_tokens < 1)
    bad_request(r.max_tokens_field, "{} must be at least 1, got {}", r.max_tokens_field, *r.max_tokens);
  // vLLM's rule (its SamplingParams): greedy samples are all the same sample.
  if (r.params.n > 1 && r.params.temperature < 1e-5f)
    bad_request("n", "n must be 1 when using greedy sampling, got {}.", r.params.n);
}

void resolve_max_tokens(GenerationRequest& r, int64_t num_prompt_tokens, int64_t max_model_len,
                        int64_t default_max_tokens, const char* prompt_field) {
  if (num_prompt_tokens >= max_model_len)
    bad_request(prompt_field,
                "This model's maximum context length is {} tokens. However, you requested {} "
                "tokens in the {}. Please reduce the length of the {}.",
                max_model_len, num_prompt_tokens, prompt_field, prompt_field);
  int64_t room = max_model_len - num_prompt_tokens;
  int64_t max_tokens = r.max_tokens ? *r.max_tokens : std::min(default_max_tokens, room);
  if (max_tokens > room)
    bad_request(r.max_tokens_field,
                "This model's maximum context length is {} tokens. However, you requested {} "
                "tokens ({} in the {}, {} in the completion). Please reduce the length of the "
                "{} or completion.",
                max_model_len, saturating_add(max_tokens, num_prompt_tokens), num_prompt_tokens,
                prompt_field, max_tokens, prompt_field);
  r.params.max_tokens = max_tokens;
  if (r.params.min_tokens > max_tokens)
    bad_request("min_tokens", "min_tokens ({}) must be at most max_tokens ({})",
                r.params.min_tokens, max_tokens);
}

}  // namespace optimate::server
