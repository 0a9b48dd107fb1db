#include "sampling/sample_row.h"

#include <algorithm>

namespace optimate::sampling {

bool has_penalties(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

bool needs_token_history(const SamplingParams& p) {
  if (has_penalties(p)) return true;
  for (const auto& word : p.bad_words_token_ids)
    if (word.size() > 1) return true;
  return false;
}

std::vector<int32_t> suppressed_ids(const SamplingParams& p, int64_t num_output_tokens,
                                    std::span<const int64_t> eos_token_ids) {
  std::vector<int32_t> out;
  if (num_output_tokens >= p.min_tokens) return out;
  if (!p.ignore_eos)
    for (int64_t id : eos_token_ids) out.push_back(static_cast<int32_t>(id));
  for (int64_t id : p.stop_token_ids) out.push_back(static_cast<int32_t>(id));
  return out;
}

bool allows_only_suppressed(const SamplingParams& p, std::span<const int64_t> eos_token_ids) {
  if (p.min_tokens <= 0 || p.allowed_token_ids.empty()) return false;
  const std::vector<int32_t> ending = suppressed_ids(p, 0, eos_token_ids);
  return std::all_of(p.allowed_token_ids.begin(), p.allowed_token_ids.end(), [&](int32_t id) {
    return std::find(ending.begin(), ending.end(), id) != ending.end();
  });
}

namespace {

// What only the host sampler applies, whatever the step.
bool host_only(const SamplingParams& p) {
  return p.logprobs.has_value() || has_penalties(p) || !p.logit_bias.empty() || !p.allowed_token_ids.empty() ||
         !p.bad_words_token_ids.empty() || p.constraint != nullptr;
}

}  // namespace

bool needs_host_sampling(const SampleRow& row) { return host_only(*row.params) || !row.suppressed_ids.empty(); }

bool may_need_host_sampling(const SamplingParams& p) {
  // suppressed_ids is empty from min_tokens on, and always when nothing can end the sequence.
  const bool may_suppress = p.min_tokens > 0 && (!p.ignore_eos || !p.stop_token_ids.empty());
  return host_only(p) || may_suppress || p.prompt_logprobs.has_value();
}

}  // namespace optimate::sampling
