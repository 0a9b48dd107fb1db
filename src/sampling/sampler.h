// Token sampling on the host, and the specification the GPU sampling kernel reproduces.
//
// For one row (one request's logits l[V], fp32), in this order (vLLM's):
//  0. Restrictions and biases, in place on l:
//     a. allowed_token_ids: every other id gets l = -inf;
//     b. bad words: the last token of a bad word whose other tokens end the output, -inf;
//     c. logit_bias: l += bias.
//  1. Penalties, in place on l:
//     a. repetition r != 1 (Hugging Face RepetitionPenaltyLogitsProcessor): for every distinct
//        id in prompt ∪ output, l = l < 0 ? l * r : l / r.
//     b. frequency f, presence p (OpenAI/vLLM, output tokens only): for every distinct id with
//        c > 0 occurrences in the output, l -= f * c + p.
//     c. suppressed ids (the engine passes EOS/stop ids while below min_tokens): l = -inf.
//     d. the grammar's mask (structured outputs): ids it does not allow, -inf.
//     Should 0-1 leave every id at -inf (the grammar's only way on is to end while min_tokens
//     suppresses the ending, or allowed_token_ids and the grammar do not meet), l restarts from
//     the model's logits with the grammar's mask alone: the grammar wins.
//  2. Greedy (temperature == 0 or top_k == 1): the token is argmax l, lowest id on ties;
//     logprobs are the log-softmax of l.
//  3. Otherwise z = l / temperature and m = max z. The kept set S starts as all ids:
//     top-k (0 < k < V): t = k-th largest z counting duplicates; S = {z >= t} (ties kept, as in
//        Hugging Face's TopKLogitsWarper).
//     top-p (p < 1): order S by (z desc, id asc), w_j = exp(z_j - m), W_S = sum of w over S;
//        keep the j-th id of that order iff the w of the ids before it sum to < p * W_S (the
//        first id is always kept). This is Hugging Face's TopPLogitsWarper rule.
//     min-p (mp > 0): keep iff z >= m + ln(mp), i.e. prob >= mp * max prob (invariant to the
//        renormalization by top-k/top-p, so its place in the order does not matter).
//     Draw: w_j = exp(z_j - m) for j in S; W = sum of w in ascending id order (fp32);
//     u = sampling_uniform(seed, output_index) (sampling/rng.h); the token is the
//     smallest kept id whose running fp32 sum of w in ascending id order exceeds u * W (if
//     rounding leaves none, the largest kept id with w > 0). One uniform per token, a function
//     of (seed, i) only: the same seed gives the same tokens alone or in any batch.
//     Logprobs are the log-softmax of z over the whole vocabulary (before truncation).
// A GPU kernel computes W and the running sum with a block scan in a different summation
// order; that differs from this file only when u * W falls within rounding of a boundary.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/sampling_params.h"

namespace optimate::sampling {

struct SampleInput {
  std::span<const float> logits;  // (vocab)
  const SamplingParams* params = nullptr;
  uint64_t seed = 0;          // params.seed, or the seed drawn for the request at admission
  int64_t output_index = 0;   // i: how many tokens the request has generated before this one
  std::span<const int32_t> prompt_ids;
  std::span<const int32_t> output_ids;
  std::span<const int32_t> suppressed_ids;  // never sampled this step (EOS under min_tokens)
  // The grammar's mask (token_mask_words(vocab) words, bit set = allowed); empty: no grammar.
  std::span<const uint32_t> allowed_mask;
};

struct TokenLogprob {
  int32_t token_id = -1;
  float logprob = 0.0f;
};

struct SampleOutput {
  int32_t token_id = -1;
  float logprob = 0.0f;                   // of token_id (see top comment); set when
                                          // params.logprobs is, else 0
  int64_t rank = 0;                       // of token_id: 1 + ids more likely (with logprobs)
  std::vector<TokenLogprob> top_logprobs; // params.logprobs entries, best first, when asked
};

class Sampler {
 public:
  explicit Sampler(int64_t vocab_size);

  SampleOutput sample(const SampleInput& in);
  void sample_batch(std::span<const SampleInput> rows, std::vector<SampleOutput>& out);

  // The distribution `sample` draws from, over the whole vocabulary: 0 outside the kept set,
  // one-hot for greedy. For tests and tools; sampling itself never normalizes.
  void distribution(const SampleInput& in, std::vector<float>& probs);

 private:
  // Fills z_ with the processed logits (penalties, temperature) and returns max z.
  float process(const SampleInput& in);
  // Step 0 of the top comment, on z_.
  void restrict_and_bias(const SampleInput& in);
  // Step 1d: -inf outside the grammar's mask.
  void apply_mask(std::span<const uint32_t> mask);
  // Fills kept_ with the ids kept by top-k/top-p/min-p in ascending id order; returns false
  // when no truncation is active (every id is kept, kept_ untouched).
  bool truncate(const SamplingParams& p, float max_z);
  void fill_logprobs(const SampleInput& in, float max_z, SampleOutput& out);

  int64_t vocab_size_;
  std::vector<float> z_;        // (vocab) processed logits
  std::vector<int32_t> order_;  // (vocab) ids, partially sorted
  std::vector<float> values_;   // (vocab) scratch for the k-th value
  std::vector<int32_t> kept_;   // kept ids, ascending
  std::vector<int32_t> counts_; // (vocab) output-token counts, all zero between rows
  std::vector<uint8_t> seen_;   // (vocab) flags, all zero between rows
};

}  // namespace optimate::sampling
