// --quantization fp8 on the CPU backend with the embedded model: the engine generates with FP8
// linear layers, close to the unquantized run, and a quantization it does not know is refused
// before anything loads, naming the accepted values.
#include <gtest/gtest.h>

#include <filesystem>

#include "config/settings.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

std::string model_path() { return std::string(OPTIMATE_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf"; }

EngineArgs small_args(WeightQuantization quantization) {
  EngineArgs args;
  args.model = model_path();
  args.device = Device::kCpu;
  args.max_model_len = 256;
  args.num_kv_blocks = 32;
  args.num_threads = 1;
  args.quantization = quantization;
  return args;
}

Results generate(WeightQuantization quantization) {
  Engine engine = create_optimized_engine(small_args(quantization));
  const std::vector<std::string> prompts = {"The capital of France is", "def fibonacci(n):"};
  for (size_t i = 0; i < prompts.size(); ++i)
    engine.add_request("p" + std::to_string(i), prompts[i], greedy(12));
  return run_to_completion(engine);
}

TEST(Fp8Weights, TheEngineGeneratesWithFp8LinearLayers) {
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "model not downloaded";
  const Results fp8 = generate(WeightQuantization::kFp8);
  const Results plain = generate(WeightQuantization::kNone);
  for (const char* id : {"p0", "p1"}) {
    const SeqResult& q = fp8.at({id, 0});
    EXPECT_EQ(q.tokens.size(), 12u) << id;
    EXPECT_EQ(q.reason, FinishReason::kLength) << id;
    EXPECT_FALSE(q.text.empty()) << id;
    // Greedy decoding from the same prompt starts the same way: the first token's logits move
    // by far less than the margin of a 135M model's confident next word.
    EXPECT_EQ(q.tokens.front(), plain.at({id, 0}).tokens.front()) << id << ": fp8 '" << q.text << "', none '"
                                                                  << plain.at({id, 0}).text << "'";
  }
}

TEST(Fp8Weights, AnUnknownQuantizationIsRefusedNamingTheChoices) {
  EngineArgs args = small_args(WeightQuantization::kNone);
  try {
    find_setting("quantization")->set_from_text(args, "int4", "--quantization");
    create_optimized_engine(args);
    FAIL() << "--quantization int4 accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("quantization"), std::string::npos) << what;
    EXPECT_NE(what.find("fp8"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace optimate::testing
