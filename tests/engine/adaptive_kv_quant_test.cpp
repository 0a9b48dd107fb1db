// The adaptive controller turning kv_quant on under memory pressure, end to end on the real CPU
// backend and the embedded model: when requests wait for KV blocks the controller raises the
// quantization level and the kv_quant policy stores and requantizes blocks at int8 before its
// own threshold (a full pool) would have turned it on; nothing is lost; once the load is gone
// the controller hands kv_quant back its own settings.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

using nlohmann::json;

std::string model_path() { return std::string(OPTIMATE_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf"; }

std::vector<int32_t> prompt(int32_t seed, int64_t n) {
  std::vector<int32_t> p = {1};
  for (int64_t i = 1; i < n; ++i) p.push_back(200 + (seed * 131 + static_cast<int32_t>(i) * 37) % 20000);
  return p;
}

double counter(const Engine& e, const std::string& optimizer, const std::string& name) {
  for (const OptimizerState& s : e.optimizer_states())
    if (s.spec.name == optimizer)
      for (const optim::PolicyCounter& c : s.counters)
        if (c.name == name) return c.value;
  ADD_FAILURE() << optimizer << " has no counter " << name;
  return -1;
}

struct LoadRun {
  Results results;
  std::vector<json> quant_moves;  // the controller's kv_quant_level actions, in order
  int64_t first_int8_step = -1, first_move_step = -1;
  double self_activations_at_first_int8 = -1;
  int64_t used_blocks_at_end = -1;
};

LoadRun run_load(bool controller_may_quantize) {
  EngineArgs args;
  args.model = model_path();
  args.max_model_len = 192;
  args.num_kv_blocks = 32;  // 16 full-precision blocks of 16 tokens, pages of two int8 slots
  args.max_num_seqs = 8;
  args.max_num_batched_tokens = 64;  // the pool fills over several steps of prefill chunks
  args.num_threads = 1;
  // kv_quant configured to turn itself on only once the cache is full.
  args.optimizers = {{"kv_quant", {{"bits", int64_t{8}}, {"activation_threshold", 1.0},
                                   {"keep_recent_tokens", int64_t{16}}, {"keep_first_tokens", int64_t{0}}}},
                     {"adaptive", {{"ttft_p99_ms", 1e6}, {"interval_ms", 100.0}, {"confirm_intervals", int64_t{1}},
                                   {"cooldown_intervals", int64_t{0}}, {"kv_high", 0.5}, {"kv_low", 0.2},
                                   {"batch_wait", false}, {"kv_quota", false},
                                   {"kv_quant", controller_may_quantize}}}};
  LoadRun out;
  std::vector<json> records;
  EngineParts parts = create_engine_parts(args);
  auto clock = std::make_shared<FakeClock>();
  parts.clock = clock;
  parts.decisions = std::make_shared<DecisionLog>([&](std::string_view line) { records.push_back(json::parse(line)); });
  Engine engine(args, std::move(parts));
  // Six requests of 60 prompt tokens and 40 answer tokens: 7 full-precision blocks each at the
  // end, 42 in all, against 16.
  for (int i = 0; i < 6; ++i) engine.add_request("r" + std::to_string(i), prompt(20 + i, 60), greedy(40));
  for (int64_t step = 0; engine.has_unfinished(); ++step) {
    collect(engine.step(), out.results);
    clock->advance_ms(100);
    const EngineStats s = engine.stats();
    for (const json& r : records)
      if (r["event"] == "controller" && r["knob"] == "kv_quant_level" && out.first_move_step < 0)
        out.first_move_step = step;
    auto it = s.kv_blocks_by_precision.find("int8");
    if (out.first_int8_step < 0 && it != s.kv_blocks_by_precision.end() && it->second > 0) {
      out.first_int8_step = step;
      out.self_activations_at_first_int8 = counter(engine, "kv_quant", "activations");
    }
  }
  out.used_blocks_at_end = engine.stats().kv_used_blocks;
  // The load is gone: the controller relaxes within a few quiet intervals.
  for (int i = 0; i < 20; ++i) {
    engine.step();
    clock->advance_ms(100);
  }
  for (const json& r : records)
    if (r["event"] == "controller" && r["knob"] == "kv_quant_level") out.quant_moves.push_back(r);
  return out;
}

TEST(AdaptiveKvQuant, MemoryPressureTurnsQuantizationOnAndTheQuietTurnsItOff) {
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "model not downloaded";
  const LoadRun without = run_load(false);
  const LoadRun with = run_load(true);
  // Nothing is lost either way.
  for (const LoadRun* r : {&without, &with}) {
    for (int i = 0; i < 6; ++i) EXPECT_EQ(r->results.at({"r" + std::to_string(i), 0}).tokens.size(), 40u);
    EXPECT_EQ(r->used_blocks_at_end, 0);
  }
  // Without the controller's lever kv_quant turns on by its own threshold, once the pool is full.
  EXPECT_TRUE(without.quant_moves.empty());
  ASSERT_GE(without.first_int8_step, 0);
  // With it: one move up while requests wait for blocks, then int8 blocks before the pool fills,
  // which kv_quant's own threshold had not turned on.
  ASSERT_GE(with.quant_moves.size(), 2u);
  EXPECT_EQ(with.quant_moves.front()["from"], 0.0);
  EXPECT_EQ(with.quant_moves.front()["to"], 1.0);
  EXPECT_NE(with.quant_moves.front()["reason"].get<std::string>().find("kv_high"), std::string::npos);
  ASSERT_GE(with.first_int8_step, with.first_move_step);
  EXPECT_EQ(with.self_activations_at_first_int8, 0.0);
  EXPECT_LT(with.first_int8_step, without.first_int8_step);
  // And back down once the load is gone.
  EXPECT_EQ(with.quant_moves.back()["to"], 0.0);
  EXPECT_NE(with.quant_moves.back()["reason"].get<std::string>().find("kv_low"), std::string::npos);
}

}  // namespace
}  // namespace optimate::testing
