// The kv_quant optimizer on the real CPU backend and the embedded model: important requests
// keep full precision and give exactly the tokens of a run without the optimizer, while the
// others' blocks are stored quantized and the same memory holds more requests at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "engine/engine.h"
#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

std::string model_path() { return std::string(OPTIMATE_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf"; }

std::vector<int32_t> prompt(int32_t seed, int64_t n) {
  std::vector<int32_t> p = {1};
  for (int64_t i = 1; i < n; ++i) p.push_back(200 + (seed * 131 + static_cast<int32_t>(i) * 37) % 20000);
  return p;
}

OptimizerSpec kv_quant(OptionMap options) { return {"kv_quant", std::move(options)}; }

TEST(KvQuant, ImportantRequestsRunExactlyAsWithoutTheOptimizer) {
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "model not downloaded";
  auto run = [](std::vector<OptimizerSpec> optimizers, EngineStats* peak) {
    EngineArgs args;
    args.model = model_path();
    args.max_model_len = 256;
    args.num_kv_blocks = 64;
    args.max_num_batched_tokens = 32;  // prompts in several chunks
    args.num_threads = 1;
    args.optimizers = std::move(optimizers);
    Engine engine = create_optimized_engine(args);
    engine.add_request("high", prompt(1, 40), greedy(12), {.priority = 1});
    for (int i = 0; i < 3; ++i) engine.add_request("low" + std::to_string(i), prompt(2 + i, 40), greedy(12));
    Results results;
    while (engine.has_unfinished()) {
      collect(engine.step(), results);
      const EngineStats s = engine.stats();
      if (peak && s.kv_blocks_by_precision.count("int8")) *peak = s;
    }
    EXPECT_EQ(engine.stats().kv_used_blocks, 0);
    return results;
  };
  const Results plain = run({}, nullptr);
  EngineStats quantized;
  // On from the start, nothing kept at full precision but the important request.
  const Results with = run({kv_quant({{"bits", int64_t{8}}, {"activation_threshold", 0.0},
                                      {"keep_recent_tokens", int64_t{0}}, {"keep_first_tokens", int64_t{0}}})},
                           &quantized);
  EXPECT_EQ(with.at({"high", 0}).tokens, plain.at({"high", 0}).tokens);
  EXPECT_EQ(with.at({"high", 0}).tokens.size(), 12u);
  // The others did run on int8 blocks.
  EXPECT_GT(quantized.kv_blocks_by_precision["int8"], 0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(with.at({"low" + std::to_string(i), 0}).tokens.size(), 12u);
}

TEST(KvQuant, TheSameMemoryHoldsMoreRequestsAtOnce) {
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "model not downloaded";
  // 16 full-precision blocks of 16 tokens either way: a static cache of 16 slots, or a dynamic
  // one of 16 pages of 2 slots (an int8 block per slot). Six 60-token prompts need 24 blocks.
  auto peak_running = [](int64_t num_slots, std::vector<OptimizerSpec> optimizers, int64_t* requantized) {
    EngineArgs args;
    args.model = model_path();
    args.max_model_len = 128;
    args.num_kv_blocks = num_slots;
    args.num_threads = 1;
    args.optimizers = std::move(optimizers);
    Engine engine = create_optimized_engine(args);
    for (int i = 0; i < 6; ++i) engine.add_request("r" + std::to_string(i), prompt(10 + i, 60), greedy(4));
    int64_t peak = 0;
    Results results;
    while (engine.has_unfinished()) {
      collect(engine.step(), results);
      peak = std::max(peak, engine.stats().num_running);
    }
    for (int i = 0; i < 6; ++i) EXPECT_EQ(results.at({"r" + std::to_string(i), 0}).tokens.size(), 4u);
    const EngineStats s = engine.stats();
    EXPECT_EQ(s.kv_used_blocks, 0);
    if (requantized) *requantized = s.kv_requantized_blocks;
    return peak;
  };
  const int64_t plain = peak_running(16, {}, nullptr);
  int64_t requantized = 0;
  // Turned on once half the cache is used: the first four requests fill it at full precision,
  // then two written blocks of each (all but the newest 16 tokens) are requantized: 8 blocks
  // free half a page each, the 8 int8 blocks the other two requests need.
  const int64_t with = peak_running(32, {kv_quant({{"bits", int64_t{8}}, {"activation_threshold", 0.5},
                                                   {"deactivation_threshold", 0.4},
                                                   {"keep_recent_tokens", int64_t{16}},
                                                   {"keep_first_tokens", int64_t{0}}})}, &requantized);
  EXPECT_EQ(plain, 4);
  EXPECT_EQ(with, 6);
  EXPECT_EQ(requantized, 8);
}

TEST(KvQuant, OptionsAreCheckedAndTheCacheMustBeLaidOutForIt) {
  EXPECT_THROW(optim::OptimizerRegistry::with_builtin().build(kv_quant({{"bits", int64_t{3}}})), Error);
  EXPECT_THROW(optim::OptimizerRegistry::with_builtin().build(
                   kv_quant({{"activation_threshold", 0.5}, {"deactivation_threshold", 0.7}})), Error);
  EXPECT_THROW(optim::OptimizerRegistry::with_builtin().build(kv_quant({{"bit", int64_t{8}}})), Error);
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "model not downloaded";
  // Enabled at run time on a cache laid out without it: at its first allocation it falls back
  // to the baseline with a reason that names the restart needed, and nothing is lost.
  EngineArgs args;
  args.model = model_path();
  args.max_model_len = 128;
  args.num_kv_blocks = 16;
  args.num_threads = 1;
  Engine engine = create_optimized_engine(args);
  engine.set_optimizer(kv_quant({{"activation_threshold", 0.0}}));
  engine.add_request("a", prompt(3, 20), greedy(2));
  const Results results = run_to_completion(engine);
  EXPECT_EQ(results.at({"a", 0}).tokens.size(), 2u);
  bool fell_back = false;
  for (const OptimizerState& s : engine.optimizer_states()) {
    if (s.spec.name != "kv_quant") continue;
    ASSERT_TRUE(s.fallback.has_value());
    EXPECT_EQ(s.fallback->reason, FallbackReason::kStepFailure);
    EXPECT_NE(s.fallback->detail.find("restart"), std::string::npos) << s.fallback->detail;
    fell_back = !s.spec.enabled;
  }
  EXPECT_TRUE(fell_back);
}

}  // namespace
}  // namespace optimate::testing
