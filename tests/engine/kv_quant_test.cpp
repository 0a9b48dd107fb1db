// The kv_quant optimizer on the real CPU backend and the embedded model: important requests
// keep full precision and give exactly the tokens of a run without the optimizer, while the
// others' blocks are stored quantized and the same memory holds more requests at once; no
// block holding a sequence's first keep_first_tokens or newest keep_recent_tokens is ever
// stored quantized.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <utility>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "kv/kv_format.h"

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
    engine.add_request("high", prompt(1, 40), greedy(12), {.priority = {1}});
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
  // On from the start, nothing kept at full precision but the important request, and the
  // others requantized whether or not the important class needs the room.
  const Results with = run({kv_quant({{"bits", int64_t{8}}, {"activation_threshold", 0.0},
                                      {"keep_recent_tokens", int64_t{0}}, {"keep_first_tokens", int64_t{0}},
                                      {"protect_priority", false}})},
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
  // then two written blocks of each (all but the newest 16 tokens) are requantized, two int8
  // blocks a page: 8 blocks free 4 whole pages, where the next request's full-precision blocks
  // fit.
  const int64_t with = peak_running(32, {kv_quant({{"bits", int64_t{8}}, {"activation_threshold", 0.5},
                                                   {"deactivation_threshold", 0.4},
                                                   {"keep_recent_tokens", int64_t{16}},
                                                   {"keep_first_tokens", int64_t{0}}})}, &requantized);
  EXPECT_EQ(plain, 4);
  EXPECT_GT(with, plain);
  EXPECT_GE(requantized, 8);
}

// With protect_priority, while an important request runs, the room quantizing frees does not
// admit a bigger batch of the others: no less important request is admitted once the running
// sequences' blocks (each counted as one, whatever its precision) would pass what the cache
// holds at full precision, so the important request's steps are no longer than without the
// optimizer. Without protect_priority the same cache admits more of them.
TEST(KvQuant, WhileAnImportantRequestRunsTheBatchStaysWhatFullPrecisionHolds) {
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "model not downloaded";
  // 16 full-precision blocks of 16 tokens in 16 pages of 2 int8 slots; the important request
  // runs from the first step to the last (48 tokens), six others of 60 + 4 tokens (4 blocks).
  struct Peak {
    int64_t blocks_at_admission = 0;  // the running sequences' blocks in a step that admitted one
    int64_t running = 0;
    int64_t quantized = 0;
  };
  auto run = [](bool protect) {
    EngineArgs args;
    args.model = model_path();
    args.max_model_len = 128;
    args.num_kv_blocks = 32;
    args.num_threads = 1;
    args.optimizers = {kv_quant({{"bits", int64_t{8}}, {"activation_threshold", 0.5},
                                 {"deactivation_threshold", 0.4}, {"keep_recent_tokens", int64_t{16}},
                                 {"keep_first_tokens", int64_t{0}}, {"protect_priority", protect}})};
    Engine engine = create_optimized_engine(args);
    engine.add_request("high", prompt(9, 16), greedy(80), {.priority = {1}});
    for (int i = 0; i < 6; ++i) engine.add_request("r" + std::to_string(i), prompt(10 + i, 60), greedy(4));
    Peak peak;
    Results results;
    int64_t waiting_before = engine.stats().num_waiting;
    while (engine.has_unfinished()) {
      collect(engine.step(), results);
      const EngineStats s = engine.stats();
      const bool high_running = !results.count({"high", 0}) || results.at({"high", 0}).num_finished == 0;
      if (high_running && s.num_waiting < waiting_before) {
        int64_t blocks = 0;
        for (const auto& [tag, n] : s.kv_blocks_by_precision) blocks += n;
        peak.blocks_at_admission = std::max(peak.blocks_at_admission, blocks);
      }
      if (high_running) peak.running = std::max(peak.running, s.num_running);
      if (s.kv_blocks_by_precision.count("int8")) peak.quantized = std::max(peak.quantized, s.kv_blocks_by_precision.at("int8"));
      waiting_before = s.num_waiting;
    }
    EXPECT_EQ(results.at({"high", 0}).tokens.size(), 80u);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(results.at({"r" + std::to_string(i), 0}).tokens.size(), 4u);
    EXPECT_EQ(engine.stats().kv_used_blocks, 0);
    return peak;
  };
  const Peak protected_run = run(true);
  const Peak unprotected = run(false);
  // Both quantized the others' written blocks; only the unprotected run spent the room on them.
  EXPECT_GT(protected_run.quantized, 0);
  EXPECT_LE(protected_run.blocks_at_admission, 16);
  EXPECT_GT(unprotected.blocks_at_admission, 16);
  EXPECT_GT(unprotected.running, protected_run.running);
}

// Block by block, after every step: a quantized block lies wholly past the first
// keep_first_tokens and wholly before the newest keep_recent_tokens of what was computed when
// the step began (the tokens the step computes read it), and every block that left both
// windows a step ago is quantized. Prompts are computed in chunks, so blocks fill while the
// optimizer is on.
TEST(KvQuant, TheFirstAndNewestTokensAreNeverStoredQuantized) {
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "model not downloaded";
  for (const auto& [bits, keys] : {std::pair{int64_t{8}, "token"}, std::pair{int64_t{4}, "token"},
                                   std::pair{int64_t{4}, "channel"}}) {
    const int64_t keep_first = 20, keep_recent = 24, bs = 16;
    EngineArgs args;
    args.model = model_path();
    args.max_model_len = 256;
    args.num_kv_blocks = 96;  // whole pages of 2, 4 or 6 slots
    args.block_size = bs;
    args.max_num_batched_tokens = 24;  // chunks that end inside blocks
    args.num_threads = 1;
    args.optimizers = {kv_quant({{"bits", bits}, {"int4_keys", std::string(keys)}, {"activation_threshold", 0.0},
                                 {"priority_aware", false}, {"keep_first_tokens", keep_first},
                                 {"keep_recent_tokens", keep_recent}})};
    Engine engine = create_optimized_engine(args);
    engine.add_request("long", prompt(5, 90), greedy(40));
    engine.add_request("short", prompt(6, 30), greedy(30));
    std::map<int64_t, int64_t> computed_before;  // seq -> tokens computed when the step began
    int64_t quantized_seen = 0;
    Results results;
    while (engine.has_unfinished()) {
      const sched::Scheduler& s = engine.scheduler();
      computed_before.clear();
      for (int64_t seq : s.running_queue()) computed_before[seq] = s.find(seq)->num_computed_tokens;
      collect(engine.step(), results);
      for (int64_t seq : s.running_queue()) {
        if (!computed_before.count(seq)) continue;  // admitted this step: every block is new
        const int64_t before = computed_before[seq];
        const auto blocks = s.kv().block_ids(seq);
        for (int64_t b = 0; b < static_cast<int64_t>(blocks.size()); ++b) {
          const bool quantized = kv::entry_code(blocks[b]) != 0;
          const bool outside = b * bs >= keep_first && (b + 1) * bs <= before - keep_recent;
          EXPECT_TRUE(!quantized || outside) << bits << " bits, sequence " << seq << " block " << b
                                             << " quantized with " << before << " tokens computed";
          EXPECT_TRUE(quantized || !outside) << bits << " bits, sequence " << seq << " block " << b
                                             << " still full precision with " << before << " tokens computed";
          quantized_seen += quantized ? 1 : 0;
        }
      }
    }
    EXPECT_GT(quantized_seen, 0) << bits << " bits";
    EXPECT_EQ(results.at({"long", 0}).tokens.size(), 40u);
    EXPECT_EQ(results.at({"short", 0}).tokens.size(), 30u);
    EXPECT_EQ(engine.stats().kv_used_blocks, 0);
  }
}

// What the cache holds is observable: each step that requantizes logs the blocks per
// precision and the quality estimate of the mix, which the policy's counters carry too.
TEST(KvQuant, TheDecisionLogCarriesTheMixAndItsQualityEstimate) {
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "model not downloaded";
  EngineArgs args;
  args.model = model_path();
  args.max_model_len = 128;
  args.num_kv_blocks = 32;
  args.num_threads = 1;
  args.optimizers = {kv_quant({{"bits", int64_t{8}}, {"activation_threshold", 0.0}, {"quality_int8", 0.004},
                               {"keep_recent_tokens", int64_t{16}}, {"keep_first_tokens", int64_t{0}}})};
  std::vector<nlohmann::json> records;
  EngineParts parts = create_engine_parts(args);
  parts.decisions = std::make_shared<DecisionLog>(
      [&](std::string_view line) { records.push_back(nlohmann::json::parse(line)); });
  Engine engine(args, std::move(parts));
  engine.add_request("a", prompt(7, 70), greedy(4));
  run_to_completion(engine);
  const nlohmann::json* last = nullptr;
  for (const nlohmann::json& r : records)
    if (r["event"] == "precision") last = &r;
  ASSERT_NE(last, nullptr);
  // 70 tokens: blocks 0-2 left the newest 16 and were requantized, blocks 3 and 4 stay full.
  EXPECT_EQ((*last)["blocks_int8"], 3);
  EXPECT_EQ((*last)["blocks_bf16"], 2);
  EXPECT_NEAR((*last)["quality_estimate"].get<double>(), 0.004 * 3 / 5, 1e-9);
  EXPECT_EQ((*last)["held_for_priority"], 0.0);
}

TEST(KvQuant, OptionsAreCheckedAndTheCacheMustBeLaidOutForIt) {
  EXPECT_THROW(optim::OptimizerRegistry::with_builtin().build(kv_quant({{"bits", int64_t{3}}})), Error);
  EXPECT_THROW(optim::OptimizerRegistry::with_builtin().build(
                   kv_quant({{"activation_threshold", 0.5}, {"deactivation_threshold", 0.7}})), Error);
  EXPECT_THROW(optim::OptimizerRegistry::with_builtin().build(kv_quant({{"bit", int64_t{8}}})), Error);
  EXPECT_THROW(optim::OptimizerRegistry::with_builtin().build(kv_quant({{"quality_int4", -0.1}})), Error);
  EXPECT_THROW(optim::OptimizerRegistry::with_builtin().build(kv_quant({{"int4_keys", std::string("row")}})), Error);
  EXPECT_THROW(optim::OptimizerRegistry::with_builtin().build(
                   kv_quant({{"bits", int64_t{8}}, {"int4_keys", std::string("channel")}})), Error);
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "model not downloaded";
  // Enabled at run time on a cache laid out without it: refused at once, naming the restart it
  // needs (a PUT /v1/optimizers gets a 400); the engine goes on without it and loses nothing.
  EngineArgs args;
  args.model = model_path();
  args.max_model_len = 128;
  args.num_kv_blocks = 16;
  args.num_threads = 1;
  Engine engine = create_optimized_engine(args);
  try {
    engine.set_optimizer(kv_quant({{"activation_threshold", 0.0}}));
    ADD_FAILURE() << "a cache laid out without quantized blocks took kv_quant";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("restart"), std::string::npos) << e.what();
  }
  engine.add_request("a", prompt(3, 20), greedy(2));
  const Results results = run_to_completion(engine);
  EXPECT_EQ(results.at({"a", 0}).tokens.size(), 2u);
  for (const OptimizerState& s : engine.optimizer_states())
    if (s.spec.name == "kv_quant") EXPECT_FALSE(s.spec.enabled);
  // A cache laid out for it takes new options at run time.
  args.optimizers = {kv_quant({{"activation_threshold", 0.9}})};
  Engine laid_out = create_optimized_engine(args);
  EXPECT_NO_THROW(laid_out.set_optimizer(kv_quant({{"activation_threshold", 0.0}})));
}

}  // namespace
}  // namespace optimate::testing
