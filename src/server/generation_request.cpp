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
  if (auto ids = get_int_list(body, "stop_token_ids")) {
    for (int64_t id : *ids)
      if (id < 0 || id >= vocab_size)
        bad_request("stop_token_ids", "stop_token_ids must be token ids in [0, {}), got {}",
                    vocab_size, id);
    p.stop_token_ids = *ids;
  }
  if (auto v = get_bool(body, "include_stop_str_in_output")) p.include_stop_str_in_output = *v;
  if (auto v = get_bool(body, "skip_special_tokens")) p.skip_special_tokens = *v;
  if (auto v = get_int(body, "priority")) r.priority = *v;
  if (auto v = get_bool(body, "add_special_tokens")) r.add_special_tokens = *v;

  if (auto best_of = get_int(body, "best_of"); best_of && *best_of != p.n)
    bad_request("best_of", "best_of different from n is not supported");
  if (const Json* bias = get_object(body, "logit_bias"); bias && !bias->empty())
    bad_request("logit_bias", "logit_bias is not supported");
  if (const Json* format = get_object(body, "response_format")) {
    auto type = get_string(*format, "type");
    if (type && *type != "text")
      bad_request("response_format", "response_format {} is not supported", *type);
  }

  r.stream = get_bool(body, "stream").value_or(false);
  if (const Json* options = get_object(body, "stream_options")) {
    if (!r.stream)
      bad_request("stream_options", "Stream options can only be defined when `stream=True`.");
    r.include_usage = get_bool(*options, "include_usage").value_or(false);
    r.continuous_usage_stats = get_bool(*options, "continuous_usage_stats").value_or(false);
  }
}

void validate_sampling(const GenerationRequest& r) {
  try {
    SamplingParams check = r.params;
    check.max_tokens = r.max_tokens.value_or(1);
    if (!r.max_tokens) check.min_tokens = std::min<int64_t>(check.min_tokens, check.max_tokens);
    check.validate();
  } catch (const Error& e) {
    std::string message = e.what();
    throw ApiError(400, message, message.substr(0, message.find(' ')));
  }
  if (r.max_tokens && *r.max_tokens < 1)
    bad_request("max_tokens", "max_tokens must be at least 1, got {}", *r.max_tokens);
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
    bad_request("max_tokens",
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
