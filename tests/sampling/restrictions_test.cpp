// What a request restricts or biases before a token is drawn: logit_bias, allowed_token_ids,
// bad words, a grammar's mask (and its precedence over min_tokens' suppression), and the rank
// reported with logprobs. Expected values are worked out from the rules in sampler.h.
#include <cmath>

#include <gtest/gtest.h>

#include "sampling/prompt_logprobs.h"
#include "sampling/sample_row.h"
#include "sampling/sampler.h"

namespace optimate::sampling {
namespace {

SampleInput input(const std::vector<float>& logits, const SamplingParams& p) {
  SampleInput in;
  in.logits = logits;
  in.params = &p;
  in.seed = 3;
  return in;
}

std::vector<uint32_t> mask_of(std::initializer_list<int32_t> ids, int64_t vocab) {
  std::vector<uint32_t> mask(static_cast<size_t>(token_mask_words(vocab)), 0u);
  for (int32_t id : ids) mask[id >> 5] |= 1u << (id & 31);
  return mask;
}

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 0.5f, -1.0f};

TEST(Restrictions, LogitBiasMovesTheArgmax) {
  Sampler sampler(5);
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_EQ(sampler.sample(input(kLogits, p)).token_id, 1);
  p.logit_bias = {{2, 1.5f}};  // 2 + 1.5 > 3
  EXPECT_EQ(sampler.sample(input(kLogits, p)).token_id, 2);
  p.logit_bias = {{1, -100.0f}};
  EXPECT_EQ(sampler.sample(input(kLogits, p)).token_id, 2);
}

TEST(Restrictions, LogitBiasShiftsTheDistribution) {
  Sampler sampler(5);
  SamplingParams p;  // temperature 1
  p.logit_bias = {{4, std::log(8.0f)}};  // id 4's weight times 8
  std::vector<float> probs;
  sampler.distribution(input(kLogits, p), probs);
  double w[5];
  double total = 0;
  for (int i = 0; i < 5; ++i) total += (w[i] = std::exp(kLogits[i]) * (i == 4 ? 8.0 : 1.0));
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(probs[i], w[i] / total, 1e-6) << i;
}

TEST(Restrictions, AllowedTokenIdsAreTheOnlyCandidates) {
  Sampler sampler(5);
  SamplingParams p;
  p.allowed_token_ids = {0, 3};
  std::vector<float> probs;
  sampler.distribution(input(kLogits, p), probs);
  const double total = std::exp(1.0) + std::exp(0.5);
  EXPECT_NEAR(probs[0], std::exp(1.0) / total, 1e-6);
  EXPECT_NEAR(probs[3], std::exp(0.5) / total, 1e-6);
  EXPECT_EQ(probs[1] + probs[2] + probs[4], 0.0f);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    SampleInput in = input(kLogits, p);
    in.seed = seed;
    const int32_t t = sampler.sample(in).token_id;
    EXPECT_TRUE(t == 0 || t == 3) << t;
  }
}

TEST(Restrictions, BadWordsBanTheirLastTokenAfterTheirPrefix) {
  Sampler sampler(5);
  SamplingParams p;
  p.temperature = 0.0f;
  p.bad_words_token_ids = {{3, 1}, {4}};  // "1" after "3" is banned; 4 never appears anyway
  std::vector<int32_t> after_three = {0, 3};
  std::vector<int32_t> after_zero = {3, 0};
  SampleInput in = input(kLogits, p);
  in.output_ids = after_three;
  EXPECT_EQ(sampler.sample(in).token_id, 2);
  in.output_ids = after_zero;
  EXPECT_EQ(sampler.sample(in).token_id, 1);
  SamplingParams single;
  single.temperature = 0.0f;
  single.bad_words_token_ids = {{1}};
  EXPECT_EQ(sampler.sample(input(kLogits, single)).token_id, 2);
}

TEST(Restrictions, GrammarMaskLeavesOnlyItsTokens) {
  Sampler sampler(40);
  std::vector<float> logits(40, 0.0f);
  logits[7] = 5.0f;
  logits[33] = 1.0f;
  SamplingParams p;
  p.temperature = 0.0f;
  const auto mask = mask_of({33, 35}, 40);
  SampleInput in = input(logits, p);
  in.allowed_mask = mask;
  EXPECT_EQ(sampler.sample(in).token_id, 33);
  SamplingParams sampled;  // temperature 1: only 33 and 35, in proportion e^1 : e^0
  in.params = &sampled;
  std::vector<float> probs;
  sampler.distribution(in, probs);
  EXPECT_NEAR(probs[33], std::exp(1.0) / (std::exp(1.0) + 1.0), 1e-6);
  EXPECT_NEAR(probs[35], 1.0 / (std::exp(1.0) + 1.0), 1e-6);
  EXPECT_EQ(probs[7], 0.0f);
}

TEST(Restrictions, GrammarWinsOverMinTokensSuppression) {
  // The grammar's only way on is to end (token 1, say EOS) while min_tokens suppresses it.
  Sampler sampler(5);
  SamplingParams p;
  p.temperature = 0.0f;
  const auto mask = mask_of({1}, 5);
  const std::vector<int32_t> suppressed = {1};
  SampleInput in = input(kLogits, p);
  in.allowed_mask = mask;
  in.suppressed_ids = suppressed;
  EXPECT_EQ(sampler.sample(in).token_id, 1);
}

TEST(Restrictions, RankCountsMoreLikelyTokens) {
  Sampler sampler(5);
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 1;
  p.logit_bias = {{1, -10.0f}};  // greedy now takes 2; 1 ranks below 2 and 0
  SampleOutput out = sampler.sample(input(kLogits, p));
  EXPECT_EQ(out.token_id, 2);
  EXPECT_EQ(out.rank, 1);
  ASSERT_EQ(out.top_logprobs.size(), 1u);
  EXPECT_EQ(out.top_logprobs[0].token_id, 2);
}

TEST(Restrictions, RowsWithRestrictionsAreDrawnOnTheHost) {
  auto params = std::make_shared<SamplingParams>();
  SampleRow row;
  row.params = params;
  EXPECT_FALSE(needs_host_sampling(row));
  params->logit_bias = {{1, 1.0f}};
  EXPECT_TRUE(needs_host_sampling(row));
  *params = {};
  params->allowed_token_ids = {1};
  EXPECT_TRUE(needs_host_sampling(row));
  *params = {};
  params->bad_words_token_ids = {{1, 2}};
  EXPECT_TRUE(needs_host_sampling(row));
  EXPECT_TRUE(needs_token_history(*params));
}

// log-softmax at the target, computed in double from the definition.
double reference_logprob(const std::vector<float>& row, int32_t target) {
  double max = row[0];
  for (float v : row) max = std::max<double>(max, v);
  double sum = 0;
  for (float v : row) sum += std::exp(v - max);
  return row[target] - max - std::log(sum);
}

TEST(PromptLogprobs, EachRowScoresTheNextPromptToken) {
  const int64_t vocab = 6;
  const std::vector<float> rows = {0.1f, 2.0f, -1.0f, 0.5f, 0.0f, 1.0f,   // predicts targets[0]
                                   3.0f, 3.0f, 1.0f, -2.0f, 0.0f, 0.0f};  // predicts targets[1]
  const std::vector<int32_t> targets = {5, 2};
  std::vector<PositionLogprobs> out;
  prompt_logprobs(rows, vocab, targets, 2, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].token.token_id, 5);
  EXPECT_NEAR(out[0].token.logprob, reference_logprob({rows.begin(), rows.begin() + 6}, 5), 1e-5);
  EXPECT_EQ(out[0].rank, 2);  // only id 1 is more likely
  ASSERT_EQ(out[0].top.size(), 2u);
  EXPECT_EQ(out[0].top[0].token_id, 1);
  EXPECT_EQ(out[0].top[1].token_id, 5);
  EXPECT_NEAR(out[1].token.logprob, reference_logprob({rows.begin() + 6, rows.end()}, 2), 1e-5);
  EXPECT_EQ(out[1].rank, 3);
  EXPECT_EQ(out[1].top[0].token_id, 0);  // a tie goes to the lower id
  EXPECT_EQ(out[1].top[1].token_id, 1);
}

}  // namespace
}  // namespace optimate::sampling
