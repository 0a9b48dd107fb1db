// POST /v1/completions bodies.
#include "server/api_error.h"
#include "server/openai_request.h"

namespace optimate::server {

namespace {

std::vector<int32_t> token_ids(const Json& list, int64_t vocab_size) {
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (const auto& item : list) {
    int64_t id = as_int(item, "prompt");
    if (id < 0 || id >= vocab_size)
      bad_request("prompt", "prompt token ids must be in [0, {}), got {}", vocab_size, id);
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

}  // namespace

CompletionRequest parse_completion_request(const Json& body, int64_t vocab_size) {
  CompletionRequest r;
  parse_generation_fields(body, r, vocab_size);
  r.max_tokens = get_int(body, "max_tokens");

  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) bad_request("prompt", "prompt is required");
  const Json& prompt = *it;
  if (prompt.is_string()) {
    r.prompts.emplace_back(prompt.get<std::string>());
  } else if (prompt.is_array() && !prompt.empty() && (prompt[0].is_number() || prompt[0].is_boolean())) {
    r.prompts.emplace_back(token_ids(prompt, vocab_size));
  } else if (prompt.is_array() && !prompt.empty()) {
    // A batch: every item a string, or every item a list of token ids.
    if (prompt.size() > CompletionRequest::kMaxPrompts)
      bad_request("prompt", "a request may carry at most {} prompts, got {}",
                  CompletionRequest::kMaxPrompts, prompt.size());
    const bool texts = prompt[0].is_string();
    for (const auto& item : prompt) {
      if (texts && item.is_string()) r.prompts.emplace_back(item.get<std::string>());
      else if (!texts && item.is_array()) r.prompts.emplace_back(token_ids(item, vocab_size));
      else
        bad_request("prompt", "a list of prompts must hold only strings or only lists of token ids");
    }
  } else {
    bad_request("prompt", "prompt must be a string, a list of token ids, or a list of either");
  }
  for (const Prompt& p : r.prompts)
    if (const auto* ids = std::get_if<std::vector<int32_t>>(&p); ids && ids->empty())
      bad_request("prompt", "prompt must not be empty");

  if (auto v = get_int(body, "logprobs")) r.params.logprobs = *v;
  r.echo = get_bool(body, "echo").value_or(false);
  // echo with max_tokens 0 scores the prompt alone (lm-evaluation-harness's loglikelihood): the
  // engine draws one token that is not returned. Its prompt logprobs are the logprobs asked.
  if (r.echo && r.max_tokens == 0) {
    r.echo_only = true;
    r.max_tokens = 1;
    r.params.min_tokens = 0;
  }
  if (r.echo && r.params.logprobs && !r.params.prompt_logprobs) r.params.prompt_logprobs = r.params.logprobs;
  validate_sampling(r);
  return r;
}

}  // namespace optimate::server
