// OpenAI request bodies (/v1/completions, /v1/chat/completions) parsed and validated into
// plain structs with SamplingParams, including vLLM's extra fields. Unknown fields are ignored
// as vLLM ignores them; features Optimate does not build (tools, images, logit_bias, echo,
// suffix, JSON mode) are refused with a 400 that says so.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/sampling_params.h"
#include "server/json_fields.h"
#include "tokenizer/chat_template.h"

namespace optimate::server {

// Fields /v1/completions and /v1/chat/completions share.
struct GenerationRequest {
  std::string model;  // empty: the served model
  SamplingParams params;
  // max_tokens as sent; absent means "the rest of the context" for chat and 16 for completions.
  std::optional<int64_t> max_tokens;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage_stats = false;
  int64_t priority = 0;  // as the client sent it; the server maps it to the engine's order
  bool add_special_tokens = true;
};

// Text, or token ids.
using Prompt = std::variant<std::string, std::vector<int32_t>>;

struct CompletionRequest : GenerationRequest {
  // One prompt, or a batch (a list of strings or of token-id lists): vLLM answers a batch with
  // one response holding n choices per prompt.
  std::vector<Prompt> prompts;
  static constexpr size_t kMaxPrompts = 1024;
};

struct ChatRequest : GenerationRequest {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  bool logprobs = false;  // chat's logprobs flag; top_logprobs counts the alternatives
};

// Throw ApiError(400) naming the offending field.
void parse_generation_fields(const Json& body, GenerationRequest& request, int64_t vocab_size);
void validate_sampling(const GenerationRequest& request);
CompletionRequest parse_completion_request(const Json& body, int64_t vocab_size);
ChatRequest parse_chat_request(const Json& body, int64_t vocab_size);

// Fills the caller's max_tokens default and checks the context length the way vLLM words it:
// "This model's maximum context length is N tokens. However, you requested M tokens (P in the
// messages, C in the completion). Please reduce the length of the messages or completion."
// `prompt_field` is the field that holds the prompt ("messages" for chat, "prompt" for
// completions): the error names it, as text and as `param`.
void resolve_max_tokens(GenerationRequest& request, int64_t num_prompt_tokens,
                        int64_t max_model_len, int64_t default_max_tokens,
                        const char* prompt_field);

}  // namespace optimate::server
