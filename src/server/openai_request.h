// OpenAI request bodies (/v1/completions, /v1/chat/completions) parsed and validated into
// plain structs with SamplingParams, including vLLM's extra fields. Every field vLLM reads is
// honoured or refused with a 400 naming it (docs/openai-compatibility.md lists them); fields
// vLLM does not know are ignored as vLLM ignores them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/priority_order.h"
#include "core/request_metadata.h"
#include "core/sampling_params.h"
#include "server/json_fields.h"
#include "server/tool_calls.h"
#include "structured/grammar_spec.h"
#include "tokenizer/chat_template.h"

namespace optimate::server {

// Fields /v1/completions and /v1/chat/completions share.
struct GenerationRequest {
  std::string model;  // empty: the served model
  SamplingParams params;
  // max_tokens as sent; absent means "the rest of the context" for chat and 16 for completions.
  std::optional<int64_t> max_tokens;
  // The fields the client sent max_tokens and logprobs as (chat's max_completion_tokens and
  // top_logprobs): errors name them.
  std::string max_tokens_field = "max_tokens";
  std::string logprobs_field = "logprobs";
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage_stats = false;
  ClientPriority priority;  // as sent: start_generation converts it (ModelInfo::priority_order)
  // What else the client tells the scheduler (core/request_metadata.h); its priority is the
  // field above, converted into it by start_generation.
  RequestMetadata metadata;
  bool add_special_tokens = true;
  std::string request_id;  // vLLM's request_id: the response id is built from it when given
  // best_of >= n sequences are generated and the n with the highest cumulative logprob
  // returned (never streamed).
  std::optional<int64_t> best_of;
  std::optional<int64_t> truncate_prompt_tokens;  // keep only N prompt tokens (-1: the context)
  bool truncate_left = true;                      // keep the last N (truncation_side "left")
  std::vector<std::string> bad_words;             // tokenized by the server into params
  bool return_tokens_as_token_ids = false;        // logprob tokens as "token_id:ID"
  bool return_token_ids = false;                  // choices carry token_ids (and prompt_token_ids)
  // The grammar the output must follow (response_format, structured_outputs, guided_*, or a
  // tool_choice that forces a call).
  std::optional<structured::GrammarSpec> grammar;
};

// Text, or token ids.
using Prompt = std::variant<std::string, std::vector<int32_t>>;

struct CompletionRequest : GenerationRequest {
  // One prompt, or a batch (a list of strings or of token-id lists): vLLM answers a batch with
  // one response holding n choices per prompt.
  std::vector<Prompt> prompts;
  static constexpr size_t kMaxPrompts = 1024;
  // The prompt is returned before the completion; with logprobs, its tokens' logprobs too
  // (the first token's is null). With max_tokens = 0 nothing is generated.
  bool echo = false;
  bool echo_only = false;  // echo with max_tokens 0 (the engine draws one token, not returned)
};

struct ChatRequest : GenerationRequest {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  bool continue_final_message = false;  // the last (assistant) message is continued, not closed
  bool echo = false;  // the reply starts with the last message when it is the assistant's
  bool logprobs = false;  // chat's logprobs flag; top_logprobs counts the alternatives
  ToolRequest tools;
};

// Throw ApiError(400) naming the offending field.
void parse_generation_fields(const Json& body, GenerationRequest& request, int64_t vocab_size);
void validate_sampling(const GenerationRequest& request);
CompletionRequest parse_completion_request(const Json& body, int64_t vocab_size);
ChatRequest parse_chat_request(const Json& body, int64_t vocab_size);
// response_format, structured_outputs and vLLM's guided_* fields (at most one constraint).
std::optional<structured::GrammarSpec> parse_structured_outputs(const Json& body);
// Fields vLLM reads that Optimate does not build: a 400 naming the first one present with a
// value that would change the result.
void refuse_unbuilt_fields(const Json& body);

// Fills the caller's max_tokens default and checks the context length the way vLLM words it:
// "This model's maximum context length is N tokens. However, you requested M tokens (P in the
// messages, C in the completion). Please reduce the length of the messages or completion."
// `prompt_field` is the field that holds the prompt ("messages" for chat, "prompt" for
// completions): the error names it, as text and as `param`.
void resolve_max_tokens(GenerationRequest& request, int64_t num_prompt_tokens,
                        int64_t max_model_len, int64_t default_max_tokens,
                        const char* prompt_field);

}  // namespace optimate::server
