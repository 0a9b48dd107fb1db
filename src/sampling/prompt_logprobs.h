// Log-probabilities of the prompt's own tokens (vLLM's prompt_logprobs, what echo with
// logprobs returns): row j of a prefill chunk's logits predicts the token after position j,
// so its log-softmax at that token is the token's logprob. Computed from the model's logits as
// they are (no temperature, penalty or mask), as vLLM computes them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sampler.h"

namespace optimate::sampling {

struct PositionLogprobs {
  TokenLogprob token;             // the prompt token at this position
  int64_t rank = 0;               // 1 + ids more likely than it
  std::vector<TokenLogprob> top;  // the num_top most likely ids, best first (lowest id on ties)
};

// `logits`: targets.size() rows of `vocab_size` floats; row j predicts targets[j]. Appends one
// entry per target to `out`.
void prompt_logprobs(std::span<const float> logits, int64_t vocab_size, std::span<const int32_t> targets,
                     int64_t num_top, std::vector<PositionLogprobs>& out);

}  // namespace optimate::sampling
