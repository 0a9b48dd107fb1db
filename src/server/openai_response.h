// JSON bodies of OpenAI responses and SSE chunks, shaped as vLLM writes them.
//
// Streaming rules (REFERENCE.md): a choice's first chunk carries its first text together with
// role "assistant" (no empty role-only chunk before a token exists); the chunk that finishes a
// choice carries finish_reason; with include_usage one last chunk has `choices: []` and the
// usage; the stream ends with `data: [DONE]`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/json_fields.h"

namespace optimate::server {

struct ResponseMeta {
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
};

// A token and its log-probability at one position.
struct TokenAlternative {
  int32_t token_id = 0;
  std::string token;  // its text, or "token_id:ID" with return_tokens_as_token_ids
  double logprob = 0.0;
  int64_t rank = 0;   // 1 = most likely
};

// One token's log-probability, with the most likely alternatives at its position.
struct LogprobEntry {
  TokenAlternative chosen;
  std::vector<TokenAlternative> top;
  bool known = true;  // false for a prompt's first token, which nothing predicts (JSON null)
};

// What one choice produced since its previous chunk.
struct ChoiceDelta {
  int64_t index = 0;
  std::string text;
  bool null_content = false;  // chat: content null (a reply that is only tool calls)
  std::vector<LogprobEntry> logprobs;
  bool want_logprobs = false;
  int64_t text_offset = 0;  // completions logprobs: offset of `text` in the choice's whole text
  // Chat: the reply's tool calls (message.tool_calls), or a chunk's delta items; null: none.
  Json tool_calls = nullptr;
  std::optional<std::string> finish_reason;  // set on the last delta
  Json stop_reason;  // null, the stop token id or the stop string
  // vLLM's extras: completions' per-choice prompt_logprobs, return_token_ids' ids.
  const std::vector<LogprobEntry>* prompt_logprobs = nullptr;
  const std::vector<int32_t>* prompt_token_ids = nullptr;
  const std::vector<int32_t>* token_ids = nullptr;
};

struct UsageCounts {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

Json usage_json(const UsageCounts& usage);

// Streaming chunks (the JSON only; sse_event() frames them).
std::string chat_chunk(const ResponseMeta& meta, const ChoiceDelta& delta, bool first_for_choice,
                       const UsageCounts* usage);
std::string completion_chunk(const ResponseMeta& meta, const ChoiceDelta& delta,
                             const UsageCounts* usage);
std::string usage_chunk(const ResponseMeta& meta, const UsageCounts& usage, bool chat);

// vLLM's prompt_logprobs: null for the first token, then per token a map from token id to
// {"logprob", "rank", "decoded_token"} holding the prompt token and its top alternatives.
Json prompt_logprobs_json(const std::vector<LogprobEntry>& entries);

// Whole (non-streaming) responses: one finished delta per choice, holding all of its text.
// `prompt_logprobs`: chat's response-level field (null: not asked).
std::string chat_response(const ResponseMeta& meta, const std::vector<ChoiceDelta>& choices,
                          const UsageCounts& usage, const Json& prompt_logprobs = nullptr);
std::string completion_response(const ResponseMeta& meta, const std::vector<ChoiceDelta>& choices,
                                const UsageCounts& usage);

// Serializes without throwing on invalid UTF-8 (replaced by U+FFFD): model output is checked
// upstream, but a response must never fail to be written.
std::string dump_json(const Json& value);

// SSE framing.
std::string sse_event(std::string_view json);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace optimate::server
