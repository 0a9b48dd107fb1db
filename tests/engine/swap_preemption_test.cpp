// Swap preemption and the host prefix tier on the real CPU backend with the embedded model: a
// KV pool too small for the requests together makes preemption certain, and the greedy tokens
// must be those of a run without preemption whether the victims recompute, swap, or swap with
// a host pool too small (and recompute after all); a prefix evicted to host memory and hit
// again gives the tokens it gave the first time.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/engine.h"
#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

// K and V of one 16-token block of SmolLM2-135M (30 layers, 3 KV heads of 64) in f32.
constexpr double kBlockGib = 2.0 * 30 * 3 * 16 * 64 * 4 / 1073741824.0;

std::string model_path() { return std::string(OPTIMATE_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf"; }

EngineArgs args_with(int64_t num_kv_blocks, const std::string& mode, double swap_blocks, double prefix_blocks = 0) {
  EngineArgs args;
  args.model = model_path();
  args.max_model_len = 256;
  args.num_kv_blocks = num_kv_blocks;
  args.max_num_batched_tokens = 64;
  args.num_threads = 2;
  args.preemption_mode = parse_choice<PreemptionMode>(mode, "preemption_mode");
  args.swap_space = swap_blocks * kBlockGib;
  args.host_prefix_cache_space = prefix_blocks * kBlockGib;
  return args;
}

std::vector<std::vector<int32_t>> prompts() {
  std::vector<std::vector<int32_t>> out;
  for (int r = 0; r < 6; ++r) {
    std::vector<int32_t> p = {1, 9690, 198};
    for (int i = 0; i < 30 + 7 * r; ++i) p.push_back(100 + (37 * i + 101 * r) % 4000);
    out.push_back(p);
  }
  return out;
}

Results run(Engine& engine, const std::vector<std::vector<int32_t>>& ps, int64_t max_tokens) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = max_tokens;
  greedy.ignore_eos = true;
  for (size_t i = 0; i < ps.size(); ++i) engine.add_request("r" + std::to_string(i), ps[i], greedy);
  return run_to_completion(engine);
}

void expect_same_tokens(const Results& want, const Results& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (const auto& [key, r] : want) {
    EXPECT_EQ(r.tokens, got.at(key).tokens) << what << ": " << key.first;
    EXPECT_EQ(got.at(key).num_finished, 1) << what << ": " << key.first;
  }
}

int64_t count(const EngineStats& s, const std::string& mode, const std::string& reason = "") {
  auto m = s.preemptions_by_mode.find(mode);
  if (m == s.preemptions_by_mode.end()) return 0;
  if (!reason.empty()) return m->second.count(reason) ? m->second.at(reason) : 0;
  int64_t n = 0;
  for (const auto& [r, c] : m->second) n += c;
  return n;
}

class SwapPreemption : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "model not downloaded: " << model_path();
  }
};

// 6 requests of 33-68 prompt tokens and 40 generated tokens need up to 7 blocks each, 38 in
// all; 16 blocks hold two or three at a time.
TEST_F(SwapPreemption, SwapAndRecomputeGiveTheTokensOfARunWithoutPreemption) {
  Engine roomy = create_optimized_engine(args_with(128, "recompute", 0));
  const Results want = run(roomy, prompts(), 40);
  EXPECT_EQ(roomy.stats().num_preemptions, 0);

  Engine recompute = create_optimized_engine(args_with(16, "recompute", 64));
  expect_same_tokens(want, run(recompute, prompts(), 40), "recompute");
  EXPECT_GT(count(recompute.stats(), "recompute", "forced"), 0);
  EXPECT_EQ(recompute.stats().kv_swapped_out_blocks, 0);

  Engine swap = create_optimized_engine(args_with(16, "swap", 64));
  expect_same_tokens(want, run(swap, prompts(), 40), "swap");
  const EngineStats s = swap.stats();
  EXPECT_GT(count(s, "swap", "forced"), 0);
  EXPECT_GT(s.kv_swapped_out_blocks, 0);
  EXPECT_EQ(s.kv_swapped_in_blocks, s.kv_swapped_out_blocks);
  EXPECT_EQ(s.host_swap_used_blocks, 0);
  EXPECT_EQ(s.kv_used_blocks, 0);
  // Swapped requests resumed where they stopped: less prefill work than recomputing.
  EXPECT_LT(s.num_prompt_tokens, recompute.stats().num_prompt_tokens);
}

TEST_F(SwapPreemption, HostPoolTooSmallFallsBackToRecompute) {
  Engine roomy = create_optimized_engine(args_with(128, "recompute", 0));
  const Results want = run(roomy, prompts(), 40);
  Engine tiny_host = create_optimized_engine(args_with(16, "swap", 2));
  expect_same_tokens(want, run(tiny_host, prompts(), 40), "swap space of 2 blocks");
  const EngineStats s = tiny_host.stats();
  EXPECT_GT(count(s, "recompute", "host_full"), 0);
  EXPECT_EQ(s.host_swap_used_blocks, 0);
  EXPECT_EQ(s.kv_used_blocks, 0);
}

// Recompute mode reserves no swap space, so a host prefix cache asked for beside a swap space
// (the default --swap-space is 4 GiB) gets all of its blocks and the swap region none.
TEST_F(SwapPreemption, RecomputeModeGivesTheHostTierToThePrefixCache) {
  const EngineArgs alone = args_with(16, "recompute", 0, 32);
  const EngineArgs beside_swap = args_with(16, "recompute", 64, 32);
  const EngineStats want = Engine(alone, create_engine_parts(alone)).stats();
  const EngineStats got = Engine(beside_swap, create_engine_parts(beside_swap)).stats();
  EXPECT_GT(want.host_prefix_total_blocks, 0);
  EXPECT_EQ(got.host_prefix_total_blocks, want.host_prefix_total_blocks);
  EXPECT_EQ(got.host_swap_total_blocks, 0);
}

TEST_F(SwapPreemption, HostPrefixTierHitRestoresTheSameTokens) {
  Engine engine = create_optimized_engine(args_with(16, "recompute", 0, 32));
  const std::vector<std::vector<int32_t>> first = {prompts()[5]};
  const Results want = run(engine, first, 8);
  // Other prompts take every block, evicting the first prompt's cached blocks to host memory.
  std::vector<std::vector<int32_t>> others = prompts();
  others.pop_back();
  for (auto& p : others) p[3] += 1;  // nothing shared with the first
  run(engine, others, 4);
  const EngineStats before = engine.stats();
  EXPECT_GT(before.host_prefix_cached_blocks, 0);
  const Results again = run(engine, first, 8);
  expect_same_tokens(want, again, "after a host-tier hit");
  const EngineStats after = engine.stats();
  // The prompt's 4 full blocks (68 tokens) come back from host memory.
  EXPECT_EQ(after.host_prefix_cache_hits - before.host_prefix_cache_hits, 64);
  EXPECT_EQ(after.prefix_cache_hits, before.prefix_cache_hits);
  EXPECT_EQ(after.num_prompt_tokens - before.num_prompt_tokens, 68 - 64);
}

}  // namespace
}  // namespace optimate::testing
