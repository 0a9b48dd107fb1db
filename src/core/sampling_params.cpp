#include "core/sampling_params.h"

#include <cmath>

#include "core/error.h"

namespace optimate {

void SamplingParams::validate() const {
  auto bad = [](const char* field, const auto& value, const char* rule) {
    fail(ErrorCode::kInvalidArgument, "{} must be {}, got {}", field, rule, value);
  };
  if (max_tokens < 1) bad("max_tokens", max_tokens, "at least 1");
  if (min_tokens < 0) bad("min_tokens", min_tokens, "non-negative");
  if (min_tokens > max_tokens) bad("min_tokens", min_tokens, "at most max_tokens");
  if (!std::isfinite(temperature) || temperature < 0.0f || temperature > 2.0f)
    bad("temperature", temperature, "in [0, 2]");  // vLLM's bounds
  if (!std::isfinite(top_p) || top_p <= 0.0f || top_p > 1.0f) bad("top_p", top_p, "in (0, 1]");
  if (top_k < -1) bad("top_k", top_k, "-1 (off) or positive");
  if (!std::isfinite(min_p) || min_p < 0.0f || min_p > 1.0f) bad("min_p", min_p, "in [0, 1]");
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f)
    bad("repetition_penalty", repetition_penalty, "positive");
  if (!std::isfinite(presence_penalty) || std::fabs(presence_penalty) > 2.0f)
    bad("presence_penalty", presence_penalty, "in [-2, 2]");
  if (!std::isfinite(frequency_penalty) || std::fabs(frequency_penalty) > 2.0f)
    bad("frequency_penalty", frequency_penalty, "in [-2, 2]");
  if (n < 1 || n > 128) bad("n", n, "in [1, 128]");
  if (logprobs && (*logprobs < 0 || *logprobs > 20)) bad("logprobs", *logprobs, "in [0, 20]");
  if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > 20))
    bad("prompt_logprobs", *prompt_logprobs, "in [0, 20]");
  for (const auto& [id, bias] : logit_bias)
    if (!std::isfinite(bias) || std::fabs(bias) > 100.0f) bad("logit_bias", bias, "in [-100, 100]");
  for (const auto& word : bad_words_token_ids)
    if (word.empty()) fail(ErrorCode::kInvalidArgument, "bad_words must not hold an empty word");
  for (const auto& s : stop)
    if (s.empty()) fail(ErrorCode::kInvalidArgument, "stop strings must not be empty");
}

}  // namespace optimate
