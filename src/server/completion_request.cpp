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
    r.prompt = prompt.get<std::string>();
  } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number()) {
    r.prompt = token_ids(prompt, vocab_size);
  } else if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) {
    r.prompt = prompt[0].get<std::string>();
  } else if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_array()) {
    r.prompt = token_ids(prompt[0], vocab_size);
  } else if (prompt.is_array() && prompt.size() > 1) {
    bad_request("prompt", "batched prompts are not supported; send one prompt per request");
  } else {
    bad_request("prompt", "prompt must be a string, a list of token ids, or a one-element list");
  }
  if (std::holds_alternative<std::vector<int32_t>>(r.prompt) &&
      std::get<std::vector<int32_t>>(r.prompt).empty())
    bad_request("prompt", "prompt must not be empty");

  if (auto v = get_int(body, "logprobs")) r.params.logprobs = *v;
  if (get_bool(body, "echo").value_or(false)) bad_request("echo", "echo is not supported");
  if (get_string(body, "suffix")) bad_request("suffix", "suffix is not supported");
  validate_sampling(r);
  return r;
}

}  // namespace optimate::server
