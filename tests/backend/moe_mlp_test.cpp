// The CPU mixture-of-experts MLP (backend/cpu/moe_mlp.h) against a direct evaluation of the
// same routing, token by token in double precision, for the routing's edge cases (ties
// everywhere, experts that receive no tokens, every token to the same experts) and step sizes
// from 1 to 512 tokens; and the runner's logits of a sequence the same whether its tokens go
// through the experts one at a time or 512 at once.
//
// Bounds: the fp32 path differs from the reference only in the order of its sums (1e-5 relative
// to the row's largest output); the 8-bit path rounds the gate/up and down inputs to 255 levels
// per group of 4 (q8_activations.h), about 1% of a row's largest output after two products.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_model_runner.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/q8_linear.h"
#include "backend/cpu/q8_weight_row.h"
#include "backend/cpu/moe_mlp.h"
#include "random_blocks.h"
#include "tiny_model.h"

namespace optimate::cpu {
namespace {

enum class Router { kRandom, kZero, kTopOnly };

struct MoeSetup {
  ModelConfig config;
  ModelWeights weights;
};

// tiny_moe_config's layer 0; the router zero (every logit ties: experts 0 and 1 take every
// token, the others none) or made to put every token's first choice on expert 5.
MoeSetup make(Router router, bool quantized) {
  MoeSetup s{testing::tiny_moe_config(), {}};
  s.weights = testing::tiny_weights(s.config, 11);
  LayerWeights& l = s.weights.layers[0];
  const int64_t h = s.config.hidden_size, inter = s.config.moe.expert_intermediate_size;
  if (quantized) {
    uint32_t seed = 900;
    for (ExpertWeights& e : l.experts)
      e = {testing::random_block_tensor("gate", DType::kQ4_1, {inter, h}, seed++, 3, 8),
           testing::random_block_tensor("up", DType::kQ4_1, {inter, h}, seed++, 3, 8),
           testing::random_block_tensor("down", DType::kQ8_0, {h, inter}, seed++, 3, 8)};
  }
  std::vector<float> r = to_f32(l.router);
  if (router == Router::kZero) std::fill(r.begin(), r.end(), 0.0f);
  // Row 5 all 50: a logit of 50 times the sum of the input, which random_rows' offset keeps
  // far above every other expert's.
  if (router == Router::kTopOnly) std::fill(r.begin() + 5 * h, r.begin() + 6 * h, 50.0f);
  l.router = make_f32_tensor("router", {s.config.moe.num_experts, h}, r);
  return s;
}

std::vector<float> random_rows(int64_t rows, int64_t cols, uint32_t seed, float offset) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (float& v : x) v = offset + normal(rng);
  return x;
}

// The MLP of layer 0 evaluated token by token in double, from the routing route_tokens gives
// for the same router logits.
std::vector<float> reference(const MoeSetup& s, const std::vector<float>& router_logits, const std::vector<float>& h,
                             int64_t tokens) {
  const ModelConfig& c = s.config;
  const LayerWeights& l = s.weights.layers[0];
  const int64_t hidden = c.hidden_size, inter = c.moe.expert_intermediate_size, k = c.moe.num_experts_per_tok;
  std::vector<int32_t> ids(tokens * k);
  std::vector<float> weights(tokens * k);
  route_tokens(router_logits.data(), tokens, c.moe.num_experts, k, c.moe.norm_topk_prob, ids.data(), weights.data());
  std::vector<std::vector<float>> gate, up, down;
  for (const ExpertWeights& e : l.experts) {
    gate.push_back(to_f32(e.w_gate));
    up.push_back(to_f32(e.w_up));
    down.push_back(to_f32(e.w_down));
  }
  std::vector<float> out(tokens * hidden, 0.0f);
  std::vector<double> act(inter);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* x = h.data() + t * hidden;
    for (int64_t s = 0; s < k; ++s) {
      const int32_t e = ids[t * k + s];
      for (int64_t i = 0; i < inter; ++i) {
        double g = 0, u = 0;
        for (int64_t j = 0; j < hidden; ++j) {
          g += double(gate[e][i * hidden + j]) * x[j];
          u += double(up[e][i * hidden + j]) * x[j];
        }
        act[i] = g / (1 + std::exp(-g)) * u;
      }
      for (int64_t j = 0; j < hidden; ++j) {
        double y = 0;
        for (int64_t i = 0; i < inter; ++i) y += double(down[e][j * inter + i]) * act[i];
        out[t * hidden + j] += static_cast<float>(y * weights[t * k + s]);
      }
    }
  }
  return out;
}

struct Case {
  Router router;
  bool quantized;  // expert matrices as GGUF blocks, through the integer kernels
};

class MoeMlp : public ::testing::TestWithParam<Case> {};

TEST_P(MoeMlp, MatchesTheDirectEvaluationOfItsRouting) {
  const Case& k = GetParam();
  const MoeSetup s = make(k.router, k.quantized);
  const ModelConfig& c = s.config;
  const CpuWeights packed = pack_cpu_weights(c, s.weights, k.quantized ? has_q8_kernel : nullptr, k.quantized);
  const CpuLayerWeights& w = packed.layers[0];
  if (k.quantized) ASSERT_FALSE(w.experts[0].w_gate_up.q8.empty());
  CpuThreadPool pool(2);
  MoeContext ctx{.pool = &pool, .isa = best_cpu_isa(), .matmul = [](const float* x, const CpuMatrix& m, float* y,
                                                                    int64_t rows) { linear(x, m, y, rows, false, 1); }};
  MoeScratch scratch;
  for (int64_t tokens : {1, 2, 7, 8, 9, 64, 200, 512}) {
    const std::vector<float> h = random_rows(tokens, c.hidden_size, static_cast<uint32_t>(tokens), 1.0f);
    std::vector<float> out(tokens * c.hidden_size, std::nanf(""));
    moe_mlp(h.data(), w, c.moe, c.hidden_size, tokens, out.data(), ctx, scratch);

    // The routing moe_mlp used: from the same router logits.
    std::vector<float> logits(tokens * c.moe.num_experts);
    linear(h.data(), w.router, logits.data(), tokens, false, 1);
    const std::vector<float> want = reference(s, logits, h, tokens);
    std::vector<int64_t> per_expert(c.moe.num_experts, 0);
    for (int64_t e = 0; e < c.moe.num_experts; ++e) per_expert[e] = scratch.groups.counts[e];
    if (k.router == Router::kZero)
      EXPECT_EQ(per_expert, (std::vector<int64_t>{tokens, tokens, 0, 0, 0, 0, 0, 0})) << tokens << " tokens";
    if (k.router == Router::kTopOnly) EXPECT_EQ(per_expert[5], tokens) << tokens << " tokens";

    int mismatches = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      float row_max = 0.0f;
      for (int64_t j = 0; j < c.hidden_size; ++j) row_max = std::max(row_max, std::fabs(want[t * c.hidden_size + j]));
      const float bound = (k.quantized ? 2e-2f : 1e-5f) * row_max + 1e-6f;
      for (int64_t j = 0; j < c.hidden_size; ++j) {
        const float got = out[t * c.hidden_size + j], ref = want[t * c.hidden_size + j];
        if (!(std::fabs(got - ref) <= bound) && ++mismatches <= 5)
          ADD_FAILURE() << tokens << " tokens: token " << t << " column " << j << ": " << got << " vs " << ref;
      }
    }
  }
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const char* routers[] = {"random", "zero", "top_only"};
  return std::string(routers[static_cast<int>(info.param.router)]) + (info.param.quantized ? "_blocks" : "_fp32");
}

INSTANTIATE_TEST_SUITE_P(Routings, MoeMlp,
                         ::testing::Values(Case{Router::kRandom, false}, Case{Router::kZero, false},
                                           Case{Router::kTopOnly, false}, Case{Router::kRandom, true},
                                           Case{Router::kZero, true}, Case{Router::kTopOnly, true}),
                         case_name);

// A sequence's logits do not depend on how its tokens are batched through the experts: 512
// tokens at once against the same tokens in steps of 1, 3 and 64.
TEST(MoeRunner, LogitsDoNotDependOnTheStepSize) {
  const ModelConfig c = testing::tiny_moe_config();
  const ModelWeights w = testing::tiny_weights(c, 5);
  const CpuRunnerOptions o{.num_kv_blocks = 64, .block_size = 16, .num_threads = 2,
                           .activations = CpuActivations::kF32, .max_step_tokens = 0};
  std::vector<int32_t> tokens(512), table(32);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7 + 3) % c.vocab_size);
  std::iota(table.begin(), table.end(), 0);
  std::vector<float> whole;
  CpuModelRunner one(c, w, o);
  one.forward({.seqs = {{.token_ids = tokens, .block_table = table, .all_logits = true}}}, whole);
  for (int64_t step : {1, 3, 64}) {
    CpuModelRunner r(c, w, o);
    std::vector<float> logits, all;
    for (int64_t p = 0; p < 512; p += step) {
      const int64_t n = std::min<int64_t>(step, 512 - p);
      r.forward({.seqs = {{.token_ids = std::span(tokens).subspan(p, n), .start_pos = p, .block_table = table,
                           .all_logits = true}}},
                logits);
      all.insert(all.end(), logits.begin(), logits.end());
    }
    ASSERT_EQ(all.size(), whole.size());
    int mismatches = 0;
    for (size_t i = 0; i < all.size(); ++i)
      if (!(std::fabs(all[i] - whole[i]) <= 1e-4f + 1e-4f * std::fabs(whole[i])) && ++mismatches <= 5)
        ADD_FAILURE() << "steps of " << step << ": logit " << i << " " << all[i] << " vs " << whole[i];
  }
}

}  // namespace
}  // namespace optimate::cpu
