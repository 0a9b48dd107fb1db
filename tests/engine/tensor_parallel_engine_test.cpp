// Tensor parallelism under the engine: the scheduler, KV manager and sampler drive a model split
// over in-process ranks as they drive one runner, with the same tokens; --tensor-parallel-size
// builds it, and sizes that cannot work are refused with a reason.
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/cpu/cpu_tp_runner.h"
#include "backend/tiny_model.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

const std::string kSmolLM2 = std::string(OPTIMATE_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";

Engine tiny_engine(int ranks) {
  const ModelConfig c = tiny_splittable_config();
  const ModelWeights w = tiny_weights(c, 11);
  const cpu::CpuRunnerOptions o{.num_kv_blocks = 40, .block_size = 4, .num_threads = 1,
                                .activations = CpuActivations::kF32};
  EngineConfig config;
  config.block_size = 4;
  config.max_num_seqs = 8;
  config.max_num_batched_tokens = 16;  // the longer prompts prefill in chunks
  config.max_model_len = 128;
  config.enable_prefix_caching = true;
  EngineParts parts;
  if (ranks == 1) parts.runner = std::make_unique<cpu::CpuModelRunner>(c, w, o);
  else parts.runner = cpu::make_cpu_tp_runner(c, w, o, ranks);
  parts.codec = std::make_shared<FakeCodec>();
  parts.clock = std::make_shared<FakeClock>();
  return Engine(config, std::move(parts));
}

Results run_requests(Engine& engine) {
  engine.add_request("short", std::vector<int32_t>{5, 6, 7}, greedy(8));
  std::vector<int32_t> longer;
  for (int i = 0; i < 30; ++i) longer.push_back((7 + 13 * i) % 101);
  engine.add_request("long", longer, greedy(8));
  // Shares the long prompt's first blocks: a prefix-cache hit.
  engine.add_request("shared", std::vector<int32_t>(longer.begin(), longer.begin() + 21), greedy(8, /*n=*/2));
  engine.add_request("text", "tensor parallel", greedy(6));
  return run_to_completion(engine);
}

TEST(TensorParallelEngine, TwoRanksGiveOneRunnersTokensThroughTheEngine) {
  Engine one = tiny_engine(1);
  Engine two = tiny_engine(2);
  const Results want = run_requests(one);
  const Results got = run_requests(two);
  EXPECT_EQ(tokens_of(got), tokens_of(want));
  EXPECT_EQ(got.size(), 5u);  // "shared" has two sequences
  for (const auto& [key, r] : got) {
    EXPECT_EQ(r.num_finished, 1) << key.first;
    EXPECT_EQ(r.text, want.at(key).text) << key.first;
  }
  EXPECT_EQ(two.scheduler().kv().pool().num_free_blocks(), one.scheduler().kv().pool().num_free_blocks());
}

EngineArgs smollm2_args(int64_t ranks) {
  EngineArgs args;
  args.model = kSmolLM2;
  args.device = Device::kCpu;
  args.max_model_len = 128;
  args.num_kv_blocks = 16;
  args.num_threads = 3;
  args.cpu_activations = CpuActivations::kF32;
  args.tensor_parallel_size = ranks;
  return args;
}

TEST(TensorParallelEngine, TheSettingSplitsTheEmbeddedModelOverThreeRanks) {
  if (!std::filesystem::exists(kSmolLM2)) GTEST_SKIP() << "model not downloaded: " << kSmolLM2;
  Results want, got;
  for (int64_t ranks : {1, 3}) {
    Engine engine = create_optimized_engine(smollm2_args(ranks));
    engine.add_request("a", "The capital of France is", greedy(6));
    engine.add_request("b", std::vector<int32_t>{1, 9690, 198, 2683, 359, 253, 5356}, greedy(6));
    (ranks == 1 ? want : got) = run_to_completion(engine);
  }
  EXPECT_EQ(tokens_of(got), tokens_of(want));
  EXPECT_EQ(got.at({"a", 0}).text, want.at({"a", 0}).text);
}

TEST(TensorParallelEngine, SizesThatCannotWorkAreRefusedWithAReason) {
  EngineArgs zero = smollm2_args(0);
  EXPECT_THROW(create_engine_parts(zero), Error);
  if (!std::filesystem::exists(kSmolLM2)) GTEST_SKIP() << "model not downloaded: " << kSmolLM2;
  try {
    create_engine_parts(smollm2_args(2));
    FAIL() << "2 ranks accepted for 9 heads";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("9 attention heads"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1, 3"), std::string::npos) << e.what();
  }
  // The CUDA backend refuses the same split (or, on a machine without a GPU, the device).
  EngineArgs cuda = smollm2_args(2);
  cuda.device = Device::kCuda;
  try {
    create_engine_parts(cuda);
    FAIL() << "2 ranks accepted for 9 heads on the GPU";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("9 attention heads") != std::string::npos ||
                what.find("no CUDA GPU is visible") != std::string::npos) << what;
  }
}

}  // namespace
}  // namespace optimate::testing
