#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/async_engine.h"
#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

SamplingParams params(int64_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

std::vector<int32_t> drain(RequestStream& stream, FinishReason* reason = nullptr) {
  std::vector<int32_t> tokens;
  while (auto out = stream.next()) {
    tokens.insert(tokens.end(), out->new_token_ids.begin(), out->new_token_ids.end());
    if (out->finished && reason) *reason = out->finish_reason;
  }
  return tokens;
}

TEST(AsyncEngine, ConcurrentSubmittersGetTheirOwnStreams) {
  // Reference: each prompt alone on a synchronous engine.
  std::vector<std::vector<int32_t>> expected;
  for (int i = 0; i < 16; ++i) {
    Engine e = make_fake_engine();
    e.add_request("r", std::vector<int32_t>{2 + i, 3, 4 + i}, params(8));
    expected.push_back(run_to_completion(e).at({"r", 0}).tokens);
  }
  AsyncEngine engine(make_fake_engine());
  std::vector<std::thread> threads;
  std::vector<std::vector<int32_t>> got(16);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = t; i < 16; i += 4) {
        auto stream = engine.submit("r" + std::to_string(i), std::vector<int32_t>{2 + i, 3, 4 + i}, params(8));
        got[i] = drain(*stream);
      }
    });
  for (auto& th : threads) th.join();
  for (int i = 0; i < 16; ++i) EXPECT_EQ(got[i], expected[i]) << i;
  engine.shutdown();
}

// Lets the test hold the engine thread inside its second forward pass, so an abort lands at a
// known point without sleeping.
class GatedRunner final : public ModelRunner {
 public:
  GatedRunner() : inner_(256, 4) {}
  const ModelConfig& config() const override { return inner_.config(); }
  const KvCacheShape& kv_shape() const override { return inner_.kv_shape(); }
  void requantize(std::span<const RequantizeOp> ops) override { inner_.requantize(ops); }
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override {
    std::unique_lock lock(mu_);
    if (++calls_ == 2) cv_.wait(lock, [&] { return open_; });
    inner_.forward(batch, logits);
  }
  void open() {
    { std::lock_guard lock(mu_); open_ = true; }
    cv_.notify_all();
  }

 private:
  FakeModelRunner inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  int calls_ = 0;
  bool open_ = false;
};

// An engine over a GatedRunner (`*gate` set to it) on a fake clock.
Engine gated_engine(GatedRunner** gate, int64_t max_model_len) {
  EngineConfig c;
  c.max_model_len = max_model_len;
  c.block_size = 4;
  EngineParts parts;
  auto runner = std::make_unique<GatedRunner>();
  *gate = runner.get();
  parts.runner = std::move(runner);
  parts.clock = std::make_shared<FakeClock>();
  return Engine(c, std::move(parts));
}

TEST(AsyncEngine, ErrorsAbortAndShutdown) {
  GatedRunner* gate = nullptr;
  AsyncEngine engine(gated_engine(&gate, 256));
  auto a = engine.submit("a", std::vector<int32_t>{3, 4}, params(200));
  ASSERT_TRUE(a->next().has_value());  // the first token; the engine now waits in step 2
  EXPECT_THROW(engine.submit("a", std::vector<int32_t>{3}, params(1)), Error);
  engine.abort("a");
  gate->open();
  SamplingParams bad = params(1);
  bad.temperature = -1.0f;
  EXPECT_THROW(engine.submit("b", std::vector<int32_t>{3}, bad), Error);
  FinishReason reason = FinishReason::kNone;
  const auto tokens = drain(*a, &reason);
  EXPECT_EQ(reason, FinishReason::kAbort);
  EXPECT_LE(tokens.size(), 2u);
  // Found by the engine thread: the prompt is too long; reported through the stream.
  auto too_long = engine.submit("c", std::vector<int32_t>(300, 3), params(1));
  EXPECT_THROW(too_long->next(), Error);

  auto d = engine.submit("d", std::vector<int32_t>{5}, params(5));
  engine.shutdown(ShutdownMode::kDrain);
  EXPECT_EQ(drain(*d, &reason).size(), 5u);
  EXPECT_EQ(reason, FinishReason::kLength);
  EXPECT_THROW(engine.submit("e", std::vector<int32_t>{5}, params(5)), Error);
}

TEST(AsyncEngine, ShutdownAbortEndsLongRequests) {
  GatedRunner* gate = nullptr;
  AsyncEngine engine(gated_engine(&gate, 512));
  auto a = engine.submit("a", std::vector<int32_t>{3, 4}, params(250));
  ASSERT_TRUE(a->next().has_value());  // the first token; the engine now waits in step 2
  std::thread stopper([&] { engine.shutdown(ShutdownMode::kAbort); });
  // Until the engine refuses new requests, the shutdown has not been asked for yet.
  for (int i = 0;; ++i) {
    try {
      engine.submit("probe-" + std::to_string(i), std::vector<int32_t>{3}, params(1));
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
      break;
    }
    std::this_thread::yield();
  }
  gate->open();
  stopper.join();
  FinishReason reason = FinishReason::kNone;
  const auto tokens = drain(*a, &reason);
  EXPECT_EQ(reason, FinishReason::kAbort);
  EXPECT_LT(tokens.size(), 250u);
}

}  // namespace
}  // namespace optimate::testing
