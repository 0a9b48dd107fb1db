// What one logits row of a step needs to draw its token: plain data the scheduler puts in the
// step plan, read by the host sampler (sampling/sampler.h) and by a runner that samples on its
// device. Nothing here points back into the scheduler.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/sampling_params.h"

namespace optimate::sampling {

struct SampleRow {
  std::shared_ptr<const SamplingParams> params;
  uint64_t seed = 0;            // the sequence's sampling seed
  int64_t output_index = 0;     // tokens the sequence generated before this one
  std::vector<int32_t> suppressed_ids;  // may not be drawn this step (ending tokens under min_tokens)
  // The sequence's tokens so far, for the penalties; empty when its params have none.
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;
};

// Repetition, presence or frequency penalties.
bool has_penalties(const SamplingParams& params);
// Penalties or multi-token bad words: the row needs the sequence's tokens.
bool needs_token_history(const SamplingParams& params);

// The ids a row may not draw: below min_tokens nothing may end the sequence, so its ending
// tokens (EOS unless ignored, and its stop ids) are suppressed.
std::vector<int32_t> suppressed_ids(const SamplingParams& params, int64_t num_output_tokens,
                                    std::span<const int64_t> eos_token_ids);
// Whether allowed_token_ids holds only ending tokens while min_tokens suppresses them: nothing
// could be drawn for the first tokens (a request to refuse).
bool allows_only_suppressed(const SamplingParams& params, std::span<const int64_t> eos_token_ids);

// Rows a device sampler cannot draw: penalties, logprobs, biases, allowed or banned ids and
// grammars need the whole row on the host, and so do suppressed ids.
bool needs_host_sampling(const SampleRow& row);
// Whether any row of a sequence with these params may need the host sampler (the rule above
// for every step, min_tokens included) or the host's logits (prompt logprobs).
bool may_need_host_sampling(const SamplingParams& params);

}  // namespace optimate::sampling
