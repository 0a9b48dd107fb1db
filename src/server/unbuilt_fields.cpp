// Request fields vLLM reads that Optimate does not build. Each is refused with a 400 naming it
// when its value would change the result; at its default it is accepted, since clients send
// defaults (the openai client sends none of these unless asked).
#include <string_view>

#include "server/api_error.h"
#include "server/openai_request.h"

namespace optimate::server {

namespace {

struct Unbuilt {
  const char* field;
  const char* why;
};

// Present with any non-null value (an empty object or list counts as absent).
constexpr Unbuilt kUnbuilt[] = {
    {"prompt_embeds", "prompt embeddings are not supported; send text or token ids"},
    {"logits_processors", "custom logits processors are not supported"},
    {"kv_transfer_params", "disaggregated prefill (KV transfer) is not supported"},
    {"ec_transfer_params", "encoder-cache transfer is not supported"},
    {"vllm_xargs", "vLLM extension arguments are not supported"},
    {"mm_processor_kwargs", "multimodal inputs are not supported"},
    {"cache_salt", "prefix-cache salting is not supported"},
    {"documents", "chat documents (RAG templates) are not supported by the chat templates Optimate renders"},
    {"chat_template", "a per-request chat template is not supported; the model's own template is used"},
    {"chat_template_kwargs", "chat template variables are not supported; the model's own template is used"},
    {"logprob_token_ids", "logprob_token_ids is not supported; use logprobs/top_logprobs"},
    {"repetition_detection", "repetition_detection is not supported"},
    {"thinking_token_budget", "thinking budgets are not supported (Optimate has no reasoning parser)"},
    {"suffix", "suffix is not supported (nor is it by vLLM)"},
};

bool set(const Json& body, const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return false;
  if ((it->is_object() || it->is_array()) && it->empty()) return false;
  // vLLM spells "no budget" -1 as well as null.
  if (std::string_view(field) == "thinking_token_budget" && it->is_number_integer() && it->get<int64_t>() == -1)
    return false;
  return true;
}

}  // namespace

void refuse_unbuilt_fields(const Json& body) {
  for (const Unbuilt& u : kUnbuilt)
    if (set(body, u.field)) bad_request(u.field, "{}: {}", u.field, u.why);
  if (get_bool(body, "use_beam_search").value_or(false))
    bad_request("use_beam_search", "use_beam_search: beam search is not supported");
  if (auto penalty = get_number(body, "length_penalty"); penalty && *penalty != 1.0)
    bad_request("length_penalty", "length_penalty applies to beam search, which is not supported");
  if (get_bool(body, "watermarking").value_or(false))
    bad_request("watermarking", "watermarking is not supported");
}

}  // namespace optimate::server
