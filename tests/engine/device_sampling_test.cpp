// The engine's device-sampling path: a runner that samples "on the device" (here: the fake
// model, then the CPU sampler on the runner's side, which is the rule every device sampler
// follows) must give the same tokens as host sampling, and rows the device cannot draw
// (logprobs, penalties, below min_tokens) must go through forward and the host sampler.
#include <gtest/gtest.h>

#include "sampling/sampler.h"
#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

class DeviceSamplingRunner final : public ModelRunner {
 public:
  explicit DeviceSamplingRunner(std::unique_ptr<FakeModelRunner> inner)
      : inner_(std::move(inner)), sampler_(FakeModelRunner::kVocab) {}
  const ModelConfig& config() const override { return inner_->config(); }
  const KvCacheShape& kv_shape() const override { return inner_->kv_shape(); }
  void requantize(std::span<const RequantizeOp> ops) override { inner_->requantize(ops); }
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override {
    ++host_steps;
    inner_->forward(batch, logits);
  }
  bool forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows,
                      std::vector<int32_t>& token_ids) override {
    ++device_steps;
    std::vector<float> logits;
    inner_->forward(batch, logits);
    token_ids = draw_on_host(sampler_, logits, rows, FakeModelRunner::kVocab);
    return true;
  }
  int64_t host_steps = 0;
  int64_t device_steps = 0;

 private:
  std::unique_ptr<FakeModelRunner> inner_;
  sampling::Sampler sampler_;
};

struct RunOutcome {
  Results results;
  int64_t host_steps = 0;
  int64_t device_steps = 0;
};

// Runs the same requests on the plain fake engine (device == false) or the device-sampling one.
RunOutcome run_engine(bool device, const std::vector<SamplingParams>& params) {
  EngineConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 64;
  c.max_model_len = 256;
  c.block_size = 4;
  EngineParts parts;
  auto fake = std::make_unique<FakeModelRunner>(256, 4);
  DeviceSamplingRunner* device_runner = nullptr;
  if (device) {
    auto wrapped = std::make_unique<DeviceSamplingRunner>(std::move(fake));
    device_runner = wrapped.get();
    parts.runner = std::move(wrapped);
  } else {
    parts.runner = std::move(fake);
  }
  parts.codec = std::make_shared<FakeCodec>();
  parts.clock = std::make_shared<FakeClock>();
  Engine engine(c, std::move(parts));
  for (size_t i = 0; i < params.size(); ++i)
    engine.add_request("r" + std::to_string(i), std::vector<int32_t>{3, int32_t(4 + i), 5}, params[i]);
  RunOutcome out;
  out.results = run_to_completion(engine);
  if (device_runner) {
    out.host_steps = device_runner->host_steps;
    out.device_steps = device_runner->device_steps;
  }
  return out;
}

SamplingParams sampled(float temperature, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_p = 0.9f;
  p.top_k = 20;
  p.seed = seed;
  p.max_tokens = 12;
  p.ignore_eos = true;
  return p;
}

TEST(DeviceSampling, SameTokensAsHostSamplingWithEveryStepOnTheDevice) {
  std::vector<SamplingParams> params;
  for (uint64_t i = 0; i < 6; ++i) params.push_back(sampled(i % 2 ? 0.8f : 0.0f, 100 + i));
  params[3].n = 2;  // forked sequences draw with their own seeds
  const RunOutcome host = run_engine(false, params);
  const RunOutcome device = run_engine(true, params);
  EXPECT_EQ(device.host_steps, 0);
  EXPECT_GT(device.device_steps, 0);
  ASSERT_EQ(host.results.size(), device.results.size());
  for (const auto& [key, r] : host.results) {
    ASSERT_TRUE(device.results.contains(key)) << key.first;
    EXPECT_EQ(device.results.at(key).tokens, r.tokens) << key.first << "#" << key.second;
    EXPECT_EQ(r.tokens.size(), 12u);
  }
}

TEST(DeviceSampling, MinTokensWithNothingToSuppressStaysOnTheDevice) {
  std::vector<SamplingParams> params = {sampled(0.8f, 7), sampled(0.0f, 8)};
  params[0].min_tokens = 6;  // ignore_eos and no stop ids: nothing is suppressed
  const RunOutcome device = run_engine(true, params);
  EXPECT_EQ(device.host_steps, 0);
  EXPECT_EQ(device.results.at({"r0", 0}).tokens, run_engine(false, params).results.at({"r0", 0}).tokens);
}

TEST(DeviceSampling, RowsTheDeviceCannotDrawGoThroughTheHostSampler) {
  for (int kind = 0; kind < 3; ++kind) {
    std::vector<SamplingParams> params = {sampled(0.8f, 7), sampled(0.0f, 8)};
    if (kind == 0) params[0].logprobs = 2;
    if (kind == 1) params[0].repetition_penalty = 1.3f;
    if (kind == 2) {  // EOS is suppressed below min_tokens
      params[0].min_tokens = 4;
      params[0].ignore_eos = false;
    }
    const RunOutcome host = run_engine(false, params);
    const RunOutcome device = run_engine(true, params);
    EXPECT_GT(device.host_steps, 0) << kind;
    if (kind == 2) EXPECT_GT(device.device_steps, 0) << "after min_tokens the device may draw";
    for (const auto& [key, r] : host.results)
      EXPECT_EQ(device.results.at(key).tokens, r.tokens) << kind << " " << key.first;
  }
}

}  // namespace
}  // namespace optimate::testing
