// optimate perplexity on the embedded model: the full-precision run agrees with itself exactly,
// int8 KV stays within the documented quality budget, and the figures move the right way as
// the precision drops.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "bench/perplexity.h"
#include "core/error.h"
#include "engine/tokenizer_codec.h"
#include "model/weights.h"

namespace optimate::bench {
namespace {

std::string model_path() { return std::string(OPTIMATE_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf"; }

std::vector<int32_t> prose_tokens() {
  std::ifstream in(std::string(OPTIMATE_TEST_DATA_DIR) + "/text/python-execution-model.txt");
  std::ostringstream text;
  text << in.rdbuf();
  return load_model_tokenizer(load_model_header(model_path()))->encode(text.str(), false);
}

EngineConfig config(const std::string& dtype) {
  EngineConfig c;
  c.model = model_path();
  c.kv_cache_dtype = parse_choice<KvCacheDtype>(dtype, "kv_cache_dtype");
  c.num_threads = 1;
  return c;
}

TEST(Perplexity, FullPrecisionAgreesWithItselfAndQuantizationCostsLittle) {
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "model not downloaded";
  const std::vector<int32_t> tokens = prose_tokens();
  ASSERT_GT(tokens.size(), 1000u);
  const PerplexityOptions o{.ctx = 128, .chunk = 32, .max_windows = 2};
  const PerplexityResult same = measure_perplexity(config("auto"), config("auto"), tokens, o);
  EXPECT_EQ(same.num_scored, 2 * 63);
  EXPECT_DOUBLE_EQ(same.perplexity, same.reference_perplexity);
  EXPECT_NEAR(same.mean_kl, 0.0, 1e-12);
  EXPECT_DOUBLE_EQ(same.top1_agreement, 1.0);
  // Technical English for a 135M model: a perplexity in the tens, not hundreds.
  EXPECT_GT(same.perplexity, 2.0);
  EXPECT_LT(same.perplexity, 60.0);

  const PerplexityResult int8 = measure_perplexity(config("int8"), config("auto"), tokens, o);
  const PerplexityResult int4 = measure_perplexity(config("int4"), config("auto"), tokens, o);
  EXPECT_DOUBLE_EQ(int8.reference_perplexity, same.perplexity);
  EXPECT_GT(int8.mean_kl, 0.0);
  EXPECT_LT(std::fabs(int8.perplexity / same.perplexity - 1.0), 0.01);
  EXPECT_GT(int8.top1_agreement, 0.95);
  EXPECT_GT(int4.mean_kl, int8.mean_kl);  // coarser steps, larger divergence
}

TEST(Perplexity, TooShortATextIsAClearError) {
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "model not downloaded";
  try {
    measure_perplexity(config("auto"), config("auto"), std::vector<int32_t>(10, 5), {.ctx = 64});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--ctx"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace optimate::bench
