// Mixture-of-experts routing (model/moe_routing.h): softmax top-k with and without
// renormalization, ties, and the grouping of (token, slot) pairs by expert.
#include <cmath>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "model/moe_routing.h"

namespace optimate {
namespace {

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routed route(const std::vector<float>& logits, int64_t experts, int64_t k, bool renormalize) {
  const int64_t tokens = static_cast<int64_t>(logits.size()) / experts;
  Routed r{std::vector<int32_t>(tokens * k), std::vector<float>(tokens * k)};
  route_tokens(logits.data(), tokens, experts, k, renormalize, r.ids.data(), r.weights.data());
  return r;
}

TEST(MoeRouting, TopKOfTheSoftmaxInDescendingOrder) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.0f};
  double sum = 0;
  for (float l : logits) sum += std::exp(l);
  const Routed raw = route(logits, 4, 2, false);
  EXPECT_EQ(raw.ids, (std::vector<int32_t>{1, 3}));
  EXPECT_NEAR(raw.weights[0], std::exp(2.0) / sum, 1e-6);
  EXPECT_NEAR(raw.weights[1], std::exp(1.0) / sum, 1e-6);
  const Routed norm = route(logits, 4, 2, true);
  EXPECT_EQ(norm.ids, raw.ids);
  EXPECT_NEAR(norm.weights[0] + norm.weights[1], 1.0f, 1e-6);
  EXPECT_NEAR(norm.weights[0], std::exp(2.0) / (std::exp(2.0) + std::exp(1.0)), 1e-6);
  // Top-1 renormalized is weight 1 whatever the probability.
  EXPECT_EQ(route(logits, 4, 1, true).weights, (std::vector<float>{1.0f}));
}

TEST(MoeRouting, ExactTiesGoToTheLowerExpert) {
  // All equal: experts 0..k-1. Two tied at the boundary: the lower one. Ties inside the top-k:
  // both, lower first.
  EXPECT_EQ(route(std::vector<float>(8, 0.0f), 8, 3, true).ids, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(route({0.f, 1.f, 3.f, 1.f}, 4, 2, false).ids, (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(route({5.f, 1.f, 5.f, 9.f}, 4, 3, false).ids, (std::vector<int32_t>{3, 0, 2}));
  // Probabilities that underflow to zero tie too, whatever their logits.
  EXPECT_EQ(route({0.f, -200.f, -300.f, -250.f}, 4, 3, false).ids, (std::vector<int32_t>{0, 1, 2}));
  const Routed tied = route({1.f, 1.f, -1.f}, 3, 2, true);
  EXPECT_EQ(tied.weights, (std::vector<float>{0.5f, 0.5f}));
}

TEST(MoeRouting, EveryTokenIndependently) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const int64_t experts = 16, k = 4, tokens = 37;
  std::vector<float> logits(tokens * experts);
  for (float& l : logits) l = normal(rng);
  const Routed all = route(logits, experts, k, true);
  for (int64_t t = 0; t < tokens; ++t) {
    const Routed one = route({logits.begin() + t * experts, logits.begin() + (t + 1) * experts}, experts, k, true);
    for (int64_t s = 0; s < k; ++s) {
      EXPECT_EQ(all.ids[t * k + s], one.ids[s]);
      EXPECT_EQ(all.weights[t * k + s], one.weights[s]);
    }
  }
}

TEST(MoeRouting, GroupsPairsByExpertInTokenOrder) {
  // 4 tokens, top-2 over 5 experts; expert 4 gets nothing, expert 1 every token.
  const std::vector<int32_t> ids = {1, 0, 3, 1, 1, 0, 1, 3};
  ExpertGroups g;
  group_by_expert(ids.data(), 4, 2, 5, 1, g);
  EXPECT_EQ(g.counts, (std::vector<int64_t>{2, 4, 0, 2, 0}));
  EXPECT_EQ(g.offsets, (std::vector<int64_t>{0, 2, 6, 6, 8, 8}));
  EXPECT_EQ(g.pairs, (std::vector<int32_t>{1, 5, 0, 3, 4, 6, 2, 7}));
  for (int32_t p = 0; p < 8; ++p) EXPECT_EQ(g.pairs[g.row_of[p]], p);

  // Runs padded to 4 rows: each expert's run starts on a multiple of 4, padding marked -1.
  group_by_expert(ids.data(), 4, 2, 5, 4, g);
  EXPECT_EQ(g.offsets, (std::vector<int64_t>{0, 4, 8, 8, 12, 12}));
  EXPECT_EQ(g.pairs, (std::vector<int32_t>{1, 5, -1, -1, 0, 3, 4, 6, 2, 7, -1, -1}));
  for (int32_t p = 0; p < 8; ++p) EXPECT_EQ(g.pairs[g.row_of[p]], p);
}

TEST(MoeRouting, AllTokensToOneExpert) {
  const int64_t tokens = 512;
  std::vector<int32_t> ids(tokens, 6);
  ExpertGroups g;
  group_by_expert(ids.data(), tokens, 1, 8, 8, g);
  EXPECT_EQ(g.counts[6], tokens);
  EXPECT_EQ(g.offsets[6], 0);
  EXPECT_EQ(g.offsets[7], tokens);
  EXPECT_EQ(g.offsets.back(), tokens);
  std::vector<int32_t> expected(tokens);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(g.pairs, expected);
}

}  // namespace
}  // namespace optimate
