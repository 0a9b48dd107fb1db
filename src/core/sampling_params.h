// Per-request decoding parameters (OpenAI's and vLLM's names), shared by the engine, the CPU
// sampler and the GPU sampler.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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
  int64_t n = 1;
  std::optional<int64_t> logprobs;  // number of top logprobs per generated token

  bool greedy() const { return temperature <= 0.0f || top_k == 1; }
  // Throws Error(kInvalidArgument) naming the field for out-of-range values.
  void validate() const;
};

}  // namespace optimate
