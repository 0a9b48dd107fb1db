// The CPU sampler: seeded draws independent of the batch, truncation rules and penalties as
// Hugging Face's logits processors define them (fixture from tests/scripts/make_sampling_fixtures.py).
#include "sampling/sampler.h"

#include <cmath>
#include <fstream>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sampling/rng.h"
#include "core/error.h"

namespace optimate::sampling {
namespace {

std::vector<float> log_probs(std::vector<double> p) {
  std::vector<float> out;
  for (double v : p) out.push_back(static_cast<float>(std::log(v)));
  return out;
}

SampleInput input(const std::vector<float>& logits, const SamplingParams& params, uint64_t seed = 1,
                  int64_t index = 0) {
  SampleInput in;
  in.logits = logits;
  in.params = &params;
  in.seed = seed;
  in.output_index = index;
  return in;
}

// SplitMix64 seeded with 1234567: the first outputs of Vigna's reference implementation.
TEST(SamplingRng, MatchesSplitMix64Reference) {
  EXPECT_EQ(sampling_random_bits(1234567, 0), 6457827717110365317ull);
  EXPECT_EQ(sampling_random_bits(1234567, 1), 3203168211198807973ull);
  EXPECT_EQ(sampling_random_bits(1234567, 2), 9817491932198370423ull);
  EXPECT_EQ(sampling_random_bits(1234567, 3), 4593380528125082431ull);
  EXPECT_EQ(sampling_random_bits(1234567, 4), 16408922859458223821ull);
  for (uint64_t i = 0; i < 1000; ++i) {
    const float u = sampling_uniform(42, i);
    EXPECT_GE(u, 0.0f);
    EXPECT_LT(u, 1.0f);
  }
}

TEST(Sampler, GreedyTakesArgmaxLowestIdOnTies) {
  Sampler sampler(5);
  SamplingParams p;
  p.temperature = 0.0f;
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  EXPECT_EQ(sampler.sample(input(logits, p)).token_id, 1);
  p.temperature = 1.0f;
  p.top_k = 1;  // top_k == 1 is greedy too
  EXPECT_EQ(sampler.sample(input(logits, p, 99)).token_id, 1);
}

// p = (0.4, 0.3, 0.15, 0.1, 0.05) scattered over ids: checked by hand.
class HandChecked : public ::testing::Test {
 protected:
  // ids:                   0     1     2    3     4
  std::vector<float> logits = log_probs({0.15, 0.4, 0.05, 0.3, 0.1});
  Sampler sampler{5};
  std::vector<float> probs;

  void expect_probs(const SamplingParams& p, std::vector<double> want) {
    sampler.distribution(input(logits, p), probs);
    ASSERT_EQ(probs.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(probs[i], want[i], 1e-6) << "id " << i;
  }
};

TEST_F(HandChecked, TopKKeepsKBest) {
  SamplingParams p;
  p.top_k = 2;
  expect_probs(p, {0, 0.4 / 0.7, 0, 0.3 / 0.7, 0});
}

TEST_F(HandChecked, TopPKeepsSmallestPrefixReachingP) {
  SamplingParams p;
  p.top_p = 0.75f;  // 0.4 + 0.3 = 0.7 < 0.75, so 0.15 is kept too; 0.85 >= 0.75 stops there
  expect_probs(p, {0.15 / 0.85, 0.4 / 0.85, 0, 0.3 / 0.85, 0});
  p.top_p = 0.3f;  // the best token alone already reaches p
  expect_probs(p, {0, 1, 0, 0, 0});
}

TEST_F(HandChecked, MinPKeepsTokensAboveFractionOfBest) {
  SamplingParams p;
  p.min_p = 0.3f;  // threshold 0.12: 0.1 and 0.05 go
  expect_probs(p, {0.15 / 0.85, 0.4 / 0.85, 0, 0.3 / 0.85, 0});
}

TEST_F(HandChecked, TopPAppliesAfterTopK) {
  SamplingParams p;
  p.top_k = 3;    // {0.4, 0.3, 0.15} renormalized: 0.47, 0.35, 0.18
  p.top_p = 0.6f; // 0.47 < 0.6 so the second is kept; 0.82 >= 0.6 stops
  expect_probs(p, {0, 0.4 / 0.7, 0, 0.3 / 0.7, 0});
}

TEST_F(HandChecked, TemperatureSharpens) {
  SamplingParams p;
  p.temperature = 0.5f;  // p^2 renormalized
  const double s = 0.15 * 0.15 + 0.4 * 0.4 + 0.05 * 0.05 + 0.3 * 0.3 + 0.1 * 0.1;
  expect_probs(p, {0.0225 / s, 0.16 / s, 0.0025 / s, 0.09 / s, 0.01 / s});
}

TEST_F(HandChecked, DrawsFollowTheDistribution) {
  SamplingParams p;
  p.top_k = 4;  // drops id 2
  std::map<int32_t, int> counts;
  const int n = 40000;
  for (int i = 0; i < n; ++i) ++counts[sampler.sample(input(logits, p, 7, i)).token_id];
  EXPECT_EQ(counts.count(2), 0u);
  const std::map<int32_t, double> want = {{0, 0.15 / 0.95}, {1, 0.4 / 0.95}, {3, 0.3 / 0.95}, {4, 0.1 / 0.95}};
  for (auto [id, prob] : want) {
    const double sigma = std::sqrt(prob * (1 - prob) / n);
    EXPECT_NEAR(counts[id] / static_cast<double>(n), prob, 5 * sigma) << "id " << id;
  }
}

TEST(Sampler, RepetitionPenaltyFollowsHuggingFaceRule) {
  Sampler sampler(4);
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  // Positive logits are divided, negative multiplied; repeated ids are penalized once.
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 1.0f};
  std::vector<int32_t> prompt = {0, 1, 0}, output = {1};
  SampleInput in = input(logits, p);
  in.prompt_ids = prompt;
  in.output_ids = output;
  std::vector<float> probs;
  sampler.distribution(in, probs);
  const double e0 = std::exp(1.0), e1 = std::exp(-2.0), e2 = std::exp(0.5), e3 = std::exp(1.0);
  const double s = e0 + e1 + e2 + e3;
  EXPECT_NEAR(probs[0], e0 / s, 1e-6);
  EXPECT_NEAR(probs[1], e1 / s, 1e-6);
  EXPECT_NEAR(probs[2], e2 / s, 1e-6);
  EXPECT_NEAR(probs[3], e3 / s, 1e-6);
}

TEST(Sampler, FrequencyAndPresencePenaltiesCountOutputTokens) {
  Sampler sampler(4);
  SamplingParams p;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  std::vector<float> logits = {0.0f, 0.0f, 0.0f, 0.0f};
  std::vector<int32_t> prompt = {0}, output = {2, 2, 3};  // the prompt is not penalized
  SampleInput in = input(logits, p);
  in.prompt_ids = prompt;
  in.output_ids = output;
  std::vector<float> probs;
  sampler.distribution(in, probs);
  const double e2 = std::exp(-1.25), e3 = std::exp(-0.75), s = 2 + e2 + e3;
  EXPECT_NEAR(probs[0], 1 / s, 1e-6);
  EXPECT_NEAR(probs[1], 1 / s, 1e-6);
  EXPECT_NEAR(probs[2], e2 / s, 1e-6);
  EXPECT_NEAR(probs[3], e3 / s, 1e-6);
}

TEST(Sampler, SuppressedIdsAreNeverSampled) {
  Sampler sampler(3);
  SamplingParams p;
  p.temperature = 0.0f;
  std::vector<float> logits = {0.0f, 5.0f, 1.0f};
  std::vector<int32_t> eos = {1};
  SampleInput in = input(logits, p);
  in.suppressed_ids = eos;
  EXPECT_EQ(sampler.sample(in).token_id, 2);
}

TEST(Sampler, SeededTokensDoNotDependOnTheBatch) {
  const int64_t vocab = 1000;
  std::vector<std::vector<float>> rows(3, std::vector<float>(vocab));
  for (int r = 0; r < 3; ++r)
    for (int64_t v = 0; v < vocab; ++v) rows[r][v] = static_cast<float>(std::sin(0.37 * v * (r + 1)) * 4);
  SamplingParams a, b, c;
  a.temperature = 0.9f;
  a.top_p = 0.9f;
  a.seed = 11;
  b.temperature = 1.2f;
  b.top_k = 50;
  c.temperature = 0.0f;

  Sampler alone(vocab), batched(vocab);
  std::vector<int32_t> tokens_alone, tokens_batched;
  for (int64_t i = 0; i < 32; ++i) tokens_alone.push_back(alone.sample(input(rows[0], a, *a.seed, i)).token_id);
  std::vector<SampleOutput> out;
  for (int64_t i = 0; i < 32; ++i) {
    // The seeded row sits at a different place in each step's batch, among other requests.
    std::vector<SampleInput> batch = {input(rows[1], b, 1000 + i, i), input(rows[2], c)};
    batch.insert(batch.begin() + (i % 3), input(rows[0], a, *a.seed, i));
    batched.sample_batch(batch, out);
    tokens_batched.push_back(out[i % 3].token_id);
  }
  EXPECT_EQ(tokens_alone, tokens_batched);
  std::vector<int32_t> other_seed;
  for (int64_t i = 0; i < 32; ++i) other_seed.push_back(alone.sample(input(rows[0], a, 12, i)).token_id);
  EXPECT_NE(tokens_alone, other_seed);
}

TEST(Sampler, RejectsOutOfRangeIds) {
  Sampler sampler(3);
  SamplingParams p;
  std::vector<float> logits = {0.0f, 1.0f, 2.0f};
  std::vector<int32_t> bad = {3};
  SampleInput in = input(logits, p);
  in.output_ids = bad;
  EXPECT_THROW(sampler.sample(in), Error);
  std::vector<float> short_row = {0.0f};
  EXPECT_THROW(sampler.sample(input(short_row, p)), Error);
}

TEST(Sampler, MatchesHuggingFaceLogitsProcessors) {
  std::ifstream f(std::string(OPTIMATE_TEST_DATA_DIR) + "/golden/sampling_processors.json");
  ASSERT_TRUE(f) << "missing sampling_processors.json";
  const auto j = nlohmann::json::parse(f);
  const int64_t vocab = j["vocab_size"];
  Sampler sampler(vocab);
  for (const auto& c : j["cases"]) {
    SCOPED_TRACE(c["params"].dump());
    SamplingParams p;
    const auto& cp = c["params"];
    p.temperature = cp.value("temperature", 1.0f);
    p.top_k = cp.value("top_k", -1);
    p.top_p = cp.value("top_p", 1.0f);
    p.min_p = cp.value("min_p", 0.0f);
    p.repetition_penalty = cp.value("repetition_penalty", 1.0f);
    p.logprobs = 5;
    const auto logits = c["logits"].get<std::vector<float>>();
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto output = c["output_ids"].get<std::vector<int32_t>>();
    SampleInput in = input(logits, p, 5, 0);
    in.prompt_ids = prompt;
    in.output_ids = output;

    std::vector<float> probs;
    sampler.distribution(in, probs);
    const auto want = c["probs"].get<std::vector<float>>();
    for (int64_t v = 0; v < vocab; ++v) {
      // Kept sets must match exactly; probabilities to fp32 rounding.
      EXPECT_EQ(probs[v] > 0, want[v] > 0) << "id " << v;
      EXPECT_NEAR(probs[v], want[v], 1e-6 + 1e-5 * want[v]) << "id " << v;
    }
    const SampleOutput out = sampler.sample(in);
    EXPECT_GT(want[out.token_id], 0.0f) << "sampled a token Hugging Face removes";
    ASSERT_EQ(out.top_logprobs.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(out.top_logprobs[i].token_id, c["top_logprob_ids"][i].get<int32_t>());
      EXPECT_NEAR(out.top_logprobs[i].logprob, c["top_logprobs"][i].get<float>(), 1e-5);
    }
  }
}

}  // namespace
}  // namespace optimate::sampling
