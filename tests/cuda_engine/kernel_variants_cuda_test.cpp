// Kernel variants on the CUDA runner: the unfused sampler and the separate elementwise kernels,
// chosen by the kernels optimizer at run time, draw as the stable kernels do; a variant made to
// misbehave (its draws past the vocabulary, injected around the runner) falls back to the
// stable kernels by itself, is counted, and every request ends with the stable run's tokens.
#include <gtest/gtest.h>

#include "backend/cuda/cuda_model_runner.h"
#include "cuda/test_util.h"
#include "cuda_engine/decisive_model.h"
#include "cuda_engine/small_engine.h"
#include "engine/engine.h"

namespace optimate {
namespace {

using cuda_engine_testing::decisive_model;

constexpr int64_t kBlocks = 512, kBlockSize = 16;

// The CUDA runner, with the draws of its unfused sampler pushed past the vocabulary.
class BrokenUnfusedRunner final : public ModelRunner {
 public:
  explicit BrokenUnfusedRunner(std::unique_ptr<ModelRunner> inner) : inner_(std::move(inner)) {}
  const ModelConfig& config() const override { return inner_->config(); }
  const KvCacheShape& kv_shape() const override { return inner_->kv_shape(); }
  void requantize(std::span<const RequantizeOp> ops) override { inner_->requantize(ops); }
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override { inner_->forward(batch, logits); }
  bool forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows,
                      std::vector<int32_t>& token_ids) override {
    if (!inner_->forward_sample(batch, rows, token_ids)) return false;
    if (unfused_) for (int32_t& t : token_ids) t = static_cast<int32_t>(config().vocab_size) + 1;
    return true;
  }
  std::vector<KernelFamily> kernel_families() const override { return inner_->kernel_families(); }
  void set_kernel_variant(std::string_view family, std::string_view variant) override {
    inner_->set_kernel_variant(family, variant);
    if (family == "sampling") unfused_ = variant == "unfused";
  }

 private:
  std::unique_ptr<ModelRunner> inner_;
  bool unfused_ = false;
};

Engine make_engine(const LoadedModel& m, std::vector<OptimizerSpec> optimizers, bool broken = false) {
  EngineConfig e = cuda_engine_testing::small_engine_config(kBlocks, kBlockSize);
  e.optimizers = std::move(optimizers);
  // The tiny model's steps are mostly launches, which the unfused sampler multiplies: the
  // speed rule is the CPU tests' business here.
  e.optimizer_min_throughput_ratio = 0.0;
  EngineParts parts;
  std::unique_ptr<ModelRunner> runner =
      std::make_unique<cuda::CudaModelRunner>(m, cuda_engine_testing::small_runner_options(kBlocks));
  if (broken) runner = std::make_unique<BrokenUnfusedRunner>(std::move(runner));
  parts.runner = std::move(runner);
  return Engine(e, std::move(parts));
}

using cuda_engine_testing::Tokens;

// 40 seeded requests at temperature 8 (the draws spread over many tokens).
Tokens run(Engine& engine) { return cuda_engine_testing::run_forty_requests(engine, 8.0f); }

OptimizerSpec kernels(std::string sampling, std::string elementwise) {
  return {"kernels", {{"sampling", std::move(sampling)}, {"elementwise", std::move(elementwise)}}, true};
}

TEST(KernelsOnCuda, UnfusedSamplingAndSeparateElementwiseDrawAsTheStableKernels) {
  OPTIMATE_REQUIRE_GPU();
  const LoadedModel m = decisive_model();
  Engine stable = make_engine(m, {});
  Engine variants = make_engine(m, {kernels("unfused", "separate")});
  const Tokens want = run(stable), got = run(variants);
  // The two samplers apply one rule to the same logits; only a draw within float rounding of a
  // CDF step may differ (and then the rest of that sequence).
  int equal = 0, equal_first = 0;
  for (const auto& [id, tokens] : want) {
    equal += got.at(id) == tokens;
    equal_first += got.at(id).front() == tokens.front();
  }
  EXPECT_GE(equal_first, 38) << "of 40 first draws";
  EXPECT_GE(equal, 30) << "of 40 whole sequences";
  EXPECT_TRUE(variants.stats().optimizer_fallbacks.empty());
}

TEST(KernelsOnCuda, AMisbehavingVariantFallsBackAndNoRequestIsLost) {
  OPTIMATE_REQUIRE_GPU();
  const LoadedModel m = decisive_model();
  Engine stable = make_engine(m, {});
  Engine broken = make_engine(m, {kernels("unfused", "")}, /*broken=*/true);
  const Tokens want = run(stable), got = run(broken);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [id, tokens] : want) EXPECT_EQ(got.at(id), tokens) << id;
  EXPECT_EQ((broken.stats().optimizer_fallbacks.at({"kernels", "kernel_fault"})), 1);
  EXPECT_EQ(broken.scheduler().kv().pool().num_free_blocks(), kBlocks);
}

}  // namespace
}  // namespace optimate
