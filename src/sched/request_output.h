// What a step reports for one sequence: the tokens it produced since the last report and, once
// it is done, why. The engine fills `text` from its incremental detokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace optimate::sched {

enum class FinishReason { kNone, kStop, kLength, kAbort };

// OpenAI's / vLLM's finish_reason strings: "stop", "length", "abort" ("" while running).
const char* finish_reason_name(FinishReason reason);

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
  int64_t rank = 0;  // 1 = most likely
};

// Log-probability of a generated token and the top alternatives at that position.
struct TokenLogprobs {
  TokenLogprob sampled;
  std::vector<TokenLogprob> top;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served by the prefix cache
};

struct RequestOutput {
  std::string request_id;
  int64_t index = 0;  // which of the request's n samples
  std::vector<int32_t> new_token_ids;
  std::string text;   // decoded text of new_token_ids (engine layer)
  std::vector<TokenLogprobs> logprobs;  // one per new token when logprobs were asked for
  // With prompt_logprobs, on the sequence's first output: one entry per prompt token after
  // the first (whose logprob is undefined), the token's own logprob and rank in `sampled`.
  std::vector<TokenLogprobs> prompt_logprobs;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  // vLLM's stop_reason: the stop token id or the stop string that ended the sequence.
  std::variant<std::monostate, int64_t, std::string> stop_reason;
  Usage usage;  // cumulative for this sequence
  // Time from arrival to first admission into the running set, on the engine's clock
  // (-1: not admitted yet). vLLM's request_queue_time.
  int64_t queue_ns = -1;
};

}  // namespace optimate::sched
