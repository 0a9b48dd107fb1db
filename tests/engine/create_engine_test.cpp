// create_engine_parts: the backend comes from --device (auto: a GPU when one is visible), a
// dummy model needs the GPU, and a model's shape loads without its weights.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "engine/engine.h"
#include "model/weights.h"
#if OPTIMATE_HAVE_CUDA
#include "backend/cuda/cuda_model_runner.h"
#endif

namespace optimate {
namespace {

const std::string kModel = std::string(OPTIMATE_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kLlama3Shape = std::string(OPTIMATE_TEST_DATA_DIR) + "/../../configs/models/llama-3-8b";

bool gpu_visible() {
#if OPTIMATE_HAVE_CUDA
  return cuda::cuda_device_count() > 0;
#else
  return false;
#endif
}

EngineArgs small_args() {
  EngineArgs args;
  args.model = kModel;
  args.max_model_len = 256;
  args.num_kv_blocks = 32;
  return args;
}

TEST(CreateEngine, AutoPicksTheCpuWithoutAGpuAndCudaIsRefused) {
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "model not downloaded: " << kModel;
  if (gpu_visible()) GTEST_SKIP() << "a GPU is visible; this checks the CPU-only machine";
  EngineArgs args = small_args();
  const EngineParts parts = create_engine_parts(args);
  EXPECT_EQ(parts.description.rfind("cpu ", 0), 0u) << parts.description;
  EXPECT_NE(parts.codec, nullptr);

  EngineArgs cuda = small_args();
  cuda.device = Device::kCuda;
  try {
    create_engine_parts(cuda);
    FAIL() << "--device cuda accepted without a GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos) << e.what();
  }
}

TEST(CreateEngine, DummyWeightsNeedTheGpu) {
  EngineArgs args;
  args.model = kLlama3Shape;
  args.load_format = LoadFormat::kDummy;
  args.device = Device::kCpu;
  try {
    create_engine_parts(args);
    FAIL() << "dummy weights accepted on the CPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("dummy"), std::string::npos) << e.what();
  }
}

TEST(CreateEngine, ModelHeaderLoadsTheShapeWithoutTensors) {
  const LoadedModel llama = load_model_header(kLlama3Shape);
  EXPECT_EQ(llama.config.num_layers, 32);
  EXPECT_EQ(llama.config.hidden_size, 4096);
  EXPECT_EQ(llama.config.num_kv_heads, 8);
  EXPECT_EQ(llama.config.vocab_size, 128256);
  EXPECT_TRUE(llama.weights.layers.empty());
  // The full load of the same folder fails: it has no weights.
  EXPECT_THROW(load_model(kLlama3Shape), Error);
  if (!std::filesystem::exists(kModel)) return;
  const LoadedModel smol = load_model_header(kModel);
  EXPECT_EQ(smol.config.num_layers, 30);
  EXPECT_NE(smol.gguf, nullptr);  // the tokenizer's metadata comes with it
  EXPECT_TRUE(smol.weights.layers.empty());
}

}  // namespace
}  // namespace optimate
