// Per-request decoding parameters (OpenAI's and vLLM's names), shared by the engine, the CPU
// sampler and the GPU sampler.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/token_constraint.h"

namespace optimate {

struct SamplingParams {
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;        // 1 = off
  int64_t top_k = -1;        // -1 or 0 = off
  float min_p = 0.0f;        // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off; applied to prompt and generated tokens (HF rule)
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::optional<uint64_t> seed;      // fixed seed: same tokens whatever the batch
  bool ignore_eos = false;
  std::vector<std::string> stop;
  std::vector<int64_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  bool spaces_between_special_tokens = true;  // see DecodeOptions
  int64_t n = 1;
  std::optional<int64_t> logprobs;  // number of top logprobs per generated token
  // Top alternatives to report for every prompt token after the first (0: the token's own
  // logprob only); nullopt: no prompt logprobs.
  std::optional<int64_t> prompt_logprobs;
  // OpenAI's logit_bias: added to these ids' logits before the penalties (vLLM's order).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // vLLM's allowed_token_ids: only these ids may be drawn (empty: any).
  std::vector<int32_t> allowed_token_ids;
  // vLLM's bad_words as token sequences: the last token of a sequence may not be drawn when the
  // output already ends with the ones before it (a one-token sequence is never drawn).
  std::vector<std::vector<int32_t>> bad_words_token_ids;
  // Structured outputs and tool calls: the grammar the output must follow (null: none).
  std::shared_ptr<const TokenConstraint> constraint;

  bool greedy() const { return temperature <= 0.0f || top_k == 1; }
  // Throws Error(kInvalidArgument) naming the field for out-of-range values.
  void validate() const;
};

}  // namespace optimate
