// Swap preemption and the host prefix tier on the CUDA runner: pinned host arenas, copies on a
// second stream overlapped with the steps. A KV pool too small for the requests together makes
// preemption certain; the greedy tokens must be those of a run with a pool large enough that
// nothing is preempted, with a bf16 cache and with one quantized to int8 (blocks swap at their
// stored precision), and every block must be free on both tiers afterwards. A prefix evicted to
// host memory and hit again gives the tokens it gave the first time.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

#include "backend/cuda/cuda_model_runner.h"
#include "cuda/test_util.h"
#include "cuda_engine/decisive_model.h"
#include "cuda_engine/small_engine.h"
#include "engine/engine.h"

namespace optimate {
namespace {

using cuda_engine_testing::decisive_model;
using Tokens = std::map<std::string, std::vector<int32_t>>;

constexpr int64_t kRoomy = 1024, kTight = 96, kHostSlots = 1024, kBlockSize = 16;

struct Setup {
  int64_t num_kv_blocks = kRoomy;
  std::string mode = "recompute";
  std::string kv_cache_dtype = "bf16";
  double host_prefix_gib = 0.0;
};

Engine make_engine(const LoadedModel& m, const Setup& s) {
  cuda::CudaRunnerOptions o = cuda_engine_testing::small_runner_options(s.num_kv_blocks);
  const KvCacheDtype dtype = parse_choice<KvCacheDtype>(s.kv_cache_dtype, "kv_cache_dtype");
  o.kv_cache_dtype = kv::kv_precision_for(dtype, kv::KvPrecision::kBF16);
  EngineConfig e = cuda_engine_testing::small_engine_config(s.num_kv_blocks, kBlockSize);
  e.kv_cache_dtype = dtype;
  e.preemption_mode = parse_choice<PreemptionMode>(s.mode, "preemption_mode");
  e.swap_space = s.mode == "recompute" ? 0.0 : 1.0;  // the runner's 1024 host slots bound it
  e.enable_prefix_caching = s.host_prefix_gib > 0.0;
  e.host_prefix_cache_space = s.host_prefix_gib;
  // The host tier within kHostSlots slots, swap region first.
  o.host_tier = kv::plan_host_tier(gib_bytes(e.swap_space), gib_bytes(e.host_prefix_cache_space), m.config.num_layers,
                                   cuda::CudaModelRunner::plan_layout(m.config, o), kHostSlots);
  EngineParts parts;
  parts.runner = std::make_unique<cuda::CudaModelRunner>(m, o);
  return Engine(e, std::move(parts));
}

std::vector<int32_t> prompt_of(uint64_t seed, int64_t len) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (auto& t : p) t = 1 + static_cast<int32_t>(rng() % 767);
  return p;
}

Tokens run(Engine& engine, const std::map<std::string, std::vector<int32_t>>& prompts, int64_t max_tokens) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = max_tokens;
  greedy.ignore_eos = true;
  for (const auto& [id, p] : prompts) engine.add_request(id, p, greedy);
  Tokens out;
  while (engine.has_unfinished())
    for (const RequestOutput& o : engine.step())
      out[o.request_id].insert(out[o.request_id].end(), o.new_token_ids.begin(), o.new_token_ids.end());
  return out;
}

// 40 requests of 3..600 prompt tokens and 40 generated: far more than 96 blocks at once.
std::map<std::string, std::vector<int32_t>> many_prompts() {
  std::map<std::string, std::vector<int32_t>> out;
  for (int i = 0; i < 40; ++i) out["r" + std::to_string(i)] = prompt_of(100 + i, 3 + (i * 37) % 600);
  return out;
}

int64_t swaps(const EngineStats& s) {
  int64_t n = 0;
  if (auto it = s.preemptions_by_mode.find("swap"); it != s.preemptions_by_mode.end())
    for (const auto& [reason, count] : it->second) n += count;
  return n;
}

void expect_swap_gives_the_tokens_of_no_preemption(const std::string& kv_cache_dtype) {
  const LoadedModel m = decisive_model();
  Engine roomy = make_engine(m, {.num_kv_blocks = kRoomy, .kv_cache_dtype = kv_cache_dtype});
  Engine swapping = make_engine(m, {.num_kv_blocks = kTight, .mode = "swap", .kv_cache_dtype = kv_cache_dtype});
  const Tokens want = run(roomy, many_prompts(), 40);
  const Tokens got = run(swapping, many_prompts(), 40);
  EXPECT_EQ(roomy.stats().num_preemptions, 0);
  const EngineStats s = swapping.stats();
  EXPECT_GT(swaps(s), 0) << "the tight pool must preempt by swapping";
  EXPECT_GT(s.kv_swapped_out_blocks, 0);
  EXPECT_EQ(s.kv_swapped_in_blocks, s.kv_swapped_out_blocks);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [id, tokens] : want) EXPECT_EQ(got.at(id), tokens) << kv_cache_dtype << " " << id;
  EXPECT_EQ(swapping.scheduler().kv().pool().num_free_blocks(), kTight);
  EXPECT_EQ(s.host_swap_used_blocks, 0);
}

TEST(SwapOnCuda, SwappedRequestsGiveTheTokensOfARunWithoutPreemption) {
  OPTIMATE_REQUIRE_GPU();
  expect_swap_gives_the_tokens_of_no_preemption("bf16");
}

TEST(SwapOnCuda, Int8BlocksSwapAtTheirStoredPrecision) {
  OPTIMATE_REQUIRE_GPU();
  expect_swap_gives_the_tokens_of_no_preemption("int8");
}

TEST(SwapOnCuda, AutoModeLosesNothing) {
  OPTIMATE_REQUIRE_GPU();
  const LoadedModel m = decisive_model();
  Engine roomy = make_engine(m, {.num_kv_blocks = kRoomy});
  Engine autom = make_engine(m, {.num_kv_blocks = kTight, .mode = "auto"});
  const Tokens want = run(roomy, many_prompts(), 40);
  const Tokens got = run(autom, many_prompts(), 40);
  EXPECT_GT(autom.stats().num_preemptions, 0);
  for (const auto& [id, tokens] : want) EXPECT_EQ(got.at(id), tokens) << id;
  EXPECT_EQ(autom.scheduler().kv().pool().num_free_blocks(), kTight);
}

TEST(SwapOnCuda, APrefixEvictedToHostMemoryIsRestoredWithItsTokens) {
  OPTIMATE_REQUIRE_GPU();
  const LoadedModel m = decisive_model();
  Engine engine = make_engine(m, {.num_kv_blocks = kTight, .host_prefix_gib = 0.5});
  const std::map<std::string, std::vector<int32_t>> first = {{"a", prompt_of(1, 400)}};
  std::map<std::string, std::vector<int32_t>> others;
  for (int i = 0; i < 6; ++i) others["o" + std::to_string(i)] = prompt_of(50 + i, 600);
  const Tokens a1 = run(engine, first, 16);
  run(engine, others, 4);  // pushes a's blocks out of the GPU pool, into host memory
  const Tokens a2 = run(engine, first, 16);
  EXPECT_EQ(a2.at("a"), a1.at("a"));
  const EngineStats s = engine.stats();
  EXPECT_GT(s.host_prefix_cache_hits, 0) << "the second run of 'a' must find its prefix in host memory";
  EXPECT_EQ(engine.scheduler().kv().pool().num_free_blocks(), kTight);
}

}  // namespace
}  // namespace optimate
