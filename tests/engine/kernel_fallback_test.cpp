// Kernel variants as an optimizer, with the failover of a watched variant: a variant that gives
// non-finite logits or a token outside the vocabulary, or runs slower than its stable twin,
// falls back to the stable kernels by itself, is logged and counted, and every request ends
// with the tokens of a run on the stable kernels. The faults are injected into a fake runner's
// kernel family; the fake clock times the steps.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

// The fake model behind a "sampling" family of four variants: "stable", and three that
// misbehave. Steps take 1 ms of the engine clock, 5 ms on "slow".
class KernelFaultRunner final : public ModelRunner {
 public:
  explicit KernelFaultRunner(std::shared_ptr<FakeClock> clock) : inner_(256, 4), clock_(std::move(clock)) {}
  const ModelConfig& config() const override { return inner_.config(); }
  const KvCacheShape& kv_shape() const override { return inner_.kv_shape(); }
  void requantize(std::span<const RequantizeOp> ops) override { inner_.requantize(ops); }
  std::vector<KernelFamily> kernel_families() const override {
    return {{"sampling", {"stable", "nan-logits", "bad-token", "slow"}, "stable"}};
  }
  void set_kernel_variant(std::string_view family, std::string_view variant) override {
    ASSERT_EQ(family, "sampling");
    variant_ = std::string(variant);
  }
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override {
    inner_.forward(batch, logits);
    clock_->advance_ms(variant_ == "slow" ? 5.0 : 1.0);
    if (variant_ == "nan-logits" && !logits.empty()) logits[logits.size() / 2] = std::numeric_limits<float>::quiet_NaN();
  }
  // Only the broken variant draws on the "device": a token past the vocabulary.
  bool forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows,
                      std::vector<int32_t>& token_ids) override {
    if (variant_ != "bad-token") return false;
    std::vector<float> logits;
    forward(batch, logits);
    token_ids.assign(rows.size(), static_cast<int32_t>(FakeModelRunner::kVocab + 7));
    return true;
  }
  const std::string& variant() const { return variant_; }

 private:
  FakeModelRunner inner_;
  std::shared_ptr<FakeClock> clock_;
  std::string variant_ = "stable";
};

struct Rig {
  std::shared_ptr<FakeClock> clock = std::make_shared<FakeClock>();
  std::vector<std::string> decisions;
  KernelFaultRunner* runner = nullptr;
};

Engine make_engine(Rig& rig, std::vector<OptimizerSpec> optimizers) {
  EngineConfig c = fake_engine_config({.max_num_seqs = 4, .optimizers = std::move(optimizers)});
  EngineParts parts;
  auto runner = std::make_unique<KernelFaultRunner>(rig.clock);
  rig.runner = runner.get();
  parts.runner = std::move(runner);
  parts.codec = std::make_shared<FakeCodec>();
  parts.clock = rig.clock;
  parts.policy_clock = std::make_shared<FakeClock>();
  parts.decisions = std::make_shared<DecisionLog>([&rig](std::string_view line) { rig.decisions.emplace_back(line); });
  return Engine(c, std::move(parts));
}

OptimizerSpec kernels(const std::string& variant) { return {"kernels", {{"sampling", variant}}, true}; }

std::map<std::string, std::vector<int32_t>> run(Engine& e, int n, int64_t max_tokens) {
  for (int i = 0; i < n; ++i)
    e.add_request("r" + std::to_string(i), std::vector<int32_t>{3, static_cast<int32_t>(4 + i), 5}, greedy(max_tokens));
  std::map<std::string, std::vector<int32_t>> out;
  for (const auto& [key, r] : run_to_completion(e)) {
    EXPECT_EQ(r.num_finished, 1) << key.first;
    out[key.first] = r.tokens;
  }
  return out;
}

std::map<std::string, std::vector<int32_t>> stable_run(int n, int64_t max_tokens) {
  Rig rig;
  Engine e = make_engine(rig, {});
  return run(e, n, max_tokens);
}

void expect_fell_back(Engine& e, const Rig& rig, const std::string& reason, const std::string& detail) {
  const OptimizerState* s = nullptr;
  const auto states = e.optimizer_states();
  for (const auto& st : states)
    if (st.spec.name == "kernels") s = &st;
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->spec.enabled);
  ASSERT_TRUE(s->fallback.has_value());
  EXPECT_EQ(fallback_reason_name(s->fallback->reason), reason) << s->fallback->detail;
  EXPECT_NE(s->fallback->detail.find(detail), std::string::npos) << s->fallback->detail;
  EXPECT_EQ((e.stats().optimizer_fallbacks.at({"kernels", reason})), 1);
  EXPECT_EQ(rig.runner->variant(), "stable");
  bool logged = false;
  for (const std::string& line : rig.decisions)
    logged |= line.find("\"event\":\"fallback\"") != std::string::npos &&
              line.find("\"optimizer\":\"kernels\"") != std::string::npos &&
              line.find("\"reason\":\"" + reason + "\"") != std::string::npos;
  EXPECT_TRUE(logged);
}

TEST(KernelFallback, NonFiniteLogitsFallBackAndTheStepRunsAgainOnTheStableKernel) {
  Rig rig;
  Engine e = make_engine(rig, {kernels("nan-logits")});
  EXPECT_EQ(rig.runner->variant(), "nan-logits");
  EXPECT_EQ(run(e, 4, 20), stable_run(4, 20));
  expect_fell_back(e, rig, "kernel_fault", "non-finite logit");
}

TEST(KernelFallback, ATokenOutsideTheVocabularyFallsBackAndNoRequestIsLost) {
  Rig rig;
  Engine e = make_engine(rig, {kernels("bad-token")});
  EXPECT_EQ(run(e, 4, 20), stable_run(4, 20));
  expect_fell_back(e, rig, "kernel_fault", "outside the vocabulary");
}

TEST(KernelFallback, AVariantSlowerThanItsStableTwinFallsBack) {
  Rig rig;
  Engine e = make_engine(rig, {kernels("slow")});  // 5 ms a step against 1 ms: 20%, the bound 50%
  EXPECT_EQ(run(e, 4, 40), stable_run(4, 40));
  expect_fell_back(e, rig, "throughput", "of the stable kernels' throughput");
}

TEST(KernelFallback, AVariantWithinTheBoundKeepsRunningAndSwitchesAtRunTime) {
  Rig rig;
  Engine e = make_engine(rig, {});
  EXPECT_EQ(rig.runner->variant(), "stable");
  e.set_optimizer(kernels("slow"));
  EXPECT_EQ(rig.runner->variant(), "slow");
  EngineConfig next = e.config();
  next.optimizer_min_throughput_ratio = 0.1;  // 20% of the stable throughput is within it
  e.apply_config(next);
  EXPECT_EQ(run(e, 4, 40), stable_run(4, 40));
  EXPECT_EQ(rig.runner->variant(), "slow");
  EXPECT_TRUE(e.stats().optimizer_fallbacks.empty());
  e.set_optimizer({"kernels", {}, false});
  EXPECT_EQ(rig.runner->variant(), "stable");
}

TEST(KernelFallback, AVariantTheRunnerDoesNotHaveIsRefusedNamingWhatItHas) {
  Rig rig;
  try {
    make_engine(rig, {kernels("turbo")});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel family 'sampling' has no variant 'turbo' (it has: stable, nan-logits, "
                                         "bad-token, slow)"),
              std::string::npos)
        << e.what();
  }
  Rig other;
  Engine e = make_engine(other, {});
  EXPECT_THROW(e.set_optimizer({"kernels", {{"elementwise", std::string("fused")}}, true}), Error);
  EXPECT_EQ(other.runner->variant(), "stable");
}

}  // namespace
}  // namespace optimate::testing
