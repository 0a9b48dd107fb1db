// Overlapped steps (async_scheduling): the engine plans and launches step N+1 before it has
// step N's tokens, which N+1 takes "on the device". The runner here keeps a device queue that
// runs launches and block copies in order and only when their results are needed (the latest
// a GPU stream could run them), so host bookkeeping that assumed a step had already run would
// read or overwrite the fake model's KV too late and change the tokens. Every run is compared
// with the same requests stepped one at a time.
#include <gtest/gtest.h>

#include <deque>
#include <variant>

#include "engine/engine_test_util.h"
#include "sampling/sampler.h"

namespace optimate::testing {
namespace {

class QueuedDeviceRunner final : public ModelRunner {
 public:
  explicit QueuedDeviceRunner(std::unique_ptr<FakeModelRunner> inner)
      : inner_(std::move(inner)), sampler_(FakeModelRunner::kVocab) {}
  const ModelConfig& config() const override { return inner_->config(); }
  const KvCacheShape& kv_shape() const override { return inner_->kv_shape(); }
  double host_link_bytes_per_s() const override { return inner_->host_link_bytes_per_s(); }
  void requantize(std::span<const RequantizeOp> ops) override { inner_->requantize(ops); }
  void copy_kv(std::span<const kv::KvCopy> copies) override {
    queue_.push_back(std::vector<kv::KvCopy>(copies.begin(), copies.end()));
  }
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override {
    synchronous_call();
    ++host_steps;
    inner_->forward(batch, logits);
  }
  bool forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows,
                      std::vector<int32_t>& token_ids) override {
    synchronous_call();
    ++device_steps;
    token_ids = run(batch, rows);
    return true;
  }
  bool launch_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows) override {
    EXPECT_LT(uncollected_, 2) << "more than two launches uncollected";
    Launch l;
    for (const SeqSlice& s : batch.seqs) {
      EXPECT_LE(s.start_pos + int64_t(s.token_ids.size()), config().max_position_embeddings)
          << "a step past the context";
      for (int32_t t : s.token_ids) {
        const int64_t row = last_launch_row(t);
        EXPECT_LT(row, last_launch_rows_) << "token of a row the last launch does not draw";
        if (row >= 0) ++fed_back;
      }
      l.tokens.emplace_back(s.token_ids.begin(), s.token_ids.end());
      l.tables.emplace_back(s.block_table.begin(), s.block_table.end());
      l.slices.push_back(s);
    }
    l.rows.assign(rows.begin(), rows.end());
    last_launch_rows_ = static_cast<int64_t>(rows.size());
    queue_.push_back(std::move(l));
    ++uncollected_;
    most_uncollected = std::max(most_uncollected, uncollected_);
    ++launches;
    return true;
  }
  void collect_sample(std::vector<int32_t>& token_ids) override {
    ASSERT_GT(uncollected_, 0);
    // Runs the queue up to the oldest uncollected launch.
    while (collected_.empty()) run_front();
    token_ids = std::move(collected_.front());
    collected_.pop_front();
    --uncollected_;
  }

  void time_next_step_by_stage() override { ++stage_requests; }
  int64_t stage_requests = 0;
  int64_t host_steps = 0, device_steps = 0, launches = 0, fed_back = 0, most_uncollected = 0;
  int64_t forward_tokens() const { return inner_->num_forward_tokens(); }

 private:
  struct Launch {
    std::vector<std::vector<int32_t>> tokens, tables;
    std::vector<SeqSlice> slices;
    std::vector<SampleSpec> rows;
  };

  void synchronous_call() {
    EXPECT_EQ(uncollected_, 0) << "a synchronous step with launches uncollected";
    while (!queue_.empty()) run_front();
    last_launch_rows_ = 0;
  }
  void run_front() {
    ASSERT_FALSE(queue_.empty()) << "collect with nothing launched";
    auto op = std::move(queue_.front());
    queue_.pop_front();
    if (auto* copies = std::get_if<std::vector<kv::KvCopy>>(&op)) {
      inner_->copy_kv(*copies);
      return;
    }
    Launch& l = std::get<Launch>(op);
    ForwardBatch batch;
    for (size_t i = 0; i < l.slices.size(); ++i) {
      for (int32_t& t : l.tokens[i])  // the device's feedback: the last launch's draws
        if (const int64_t row = last_launch_row(t); row >= 0) t = last_drawn_.at(static_cast<size_t>(row));
      SeqSlice s = l.slices[i];
      s.token_ids = l.tokens[i];
      s.block_table = l.tables[i];
      batch.seqs.push_back(s);
    }
    last_drawn_ = run(batch, l.rows);
    collected_.push_back(last_drawn_);
  }
  std::vector<int32_t> run(const ForwardBatch& batch, std::span<const SampleSpec> rows) {
    std::vector<float> logits;
    inner_->forward(batch, logits);
    return draw_on_host(sampler_, logits, rows, FakeModelRunner::kVocab);
  }

  std::unique_ptr<FakeModelRunner> inner_;
  sampling::Sampler sampler_;
  std::deque<std::variant<std::vector<kv::KvCopy>, Launch>> queue_;
  std::deque<std::vector<int32_t>> collected_;
  std::vector<int32_t> last_drawn_;
  int64_t last_launch_rows_ = 0;
  int64_t uncollected_ = 0;
};

struct RunSetup {
  int64_t max_num_seqs = 8;
  int64_t max_num_batched_tokens = 48;
  int64_t num_blocks = 256;
  int64_t host_swap_blocks = 0;
  std::string preemption_mode = "auto";
  int64_t max_model_len = 256;
  int64_t stage_interval = 0;
};

struct Outcome {
  Results results;
  int64_t launches = 0, fed_back = 0, most_uncollected = 0, device_steps = 0, host_steps = 0;
  int64_t preemptions = 0;
  int64_t forward_tokens = 0;
  int64_t stage_requests = 0;
};

SamplingParams params_for(size_t i) {
  SamplingParams p;
  p.max_tokens = 6 + static_cast<int64_t>(i * 5 % 17);
  p.temperature = i % 3 == 0 ? 0.0f : 0.9f;
  p.top_k = 30;
  p.seed = 1000 + i;
  p.ignore_eos = i % 4 != 1;  // the rest may draw the fake model's EOS and stop early
  if (i % 5 == 2) p.stop = {"bA"};  // a stop string found in decoded text
  if (i == 7) p.n = 2;
  return p;
}

// Adds `num_requests` requests, steps to the end (aborting "r3" after `abort_after` steps when
// that is >= 0) and returns what came out.
Engine make_engine(bool overlap, const RunSetup& setup, QueuedDeviceRunner** device) {
  EngineConfig c;
  c.max_num_seqs = setup.max_num_seqs;
  c.max_num_batched_tokens = setup.max_num_batched_tokens;
  c.max_model_len = setup.max_model_len;
  c.block_size = 4;
  c.async_scheduling = overlap;
  c.preemption_mode = parse_choice<PreemptionMode>(setup.preemption_mode, "preemption_mode");
  c.stage_profile_interval = setup.stage_interval;
  const double block_gib = static_cast<double>(2 * 2 * c.block_size) / 1073741824.0;
  c.swap_space = setup.host_swap_blocks > 0 ? (static_cast<double>(setup.host_swap_blocks) + 0.5) * block_gib : 0.0;
  EngineParts parts;
  auto runner = std::make_unique<QueuedDeviceRunner>(
      std::make_unique<FakeModelRunner>(setup.num_blocks, 4, setup.max_model_len,
                                        kv::HostTierSlots{.swap = setup.host_swap_blocks}));
  *device = runner.get();
  parts.runner = std::move(runner);
  parts.codec = std::make_shared<FakeCodec>();
  parts.clock = std::make_shared<FakeClock>();
  return Engine(c, std::move(parts));
}

Outcome run(bool overlap, const RunSetup& setup, const std::vector<SamplingParams>& params, int64_t abort_after = -1,
           int64_t toggle_every = 0) {
  QueuedDeviceRunner* device = nullptr;
  Engine engine = make_engine(overlap, setup, &device);
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<int32_t> prompt;
    for (size_t t = 0; t < 5 + i * 7 % 23; ++t) prompt.push_back(static_cast<int32_t>(2 + (i * 31 + t * 17) % 60));
    engine.add_request("r" + std::to_string(i), prompt, params[i]);
  }
  Outcome out;
  for (int64_t step = 0; engine.has_unfinished(); ++step) {
    if (step == abort_after) EXPECT_TRUE(engine.abort("r3"));
    if (toggle_every > 0 && step > 0 && step % toggle_every == 0) {  // a configuration reload
      EngineConfig next = engine.config();
      next.async_scheduling = !next.async_scheduling;
      engine.apply_config(next);
    }
    collect(engine.step(), out.results);
    EXPECT_LT(step, 100000) << "the engine does not finish";
    if (step >= 100000) break;
  }
  out.launches = device->launches;
  out.fed_back = device->fed_back;
  out.most_uncollected = device->most_uncollected;
  out.device_steps = device->device_steps;
  out.host_steps = device->host_steps;
  out.preemptions = engine.scheduler().stats().num_preemptions;
  out.forward_tokens = device->forward_tokens();
  out.stage_requests = device->stage_requests;
  return out;
}

void expect_same(const Results& sync, const Results& overlapped) {
  ASSERT_EQ(sync.size(), overlapped.size());
  for (const auto& [key, r] : sync) {
    ASSERT_TRUE(overlapped.contains(key)) << key.first << "#" << key.second;
    const SeqResult& o = overlapped.at(key);
    EXPECT_EQ(o.tokens, r.tokens) << key.first << "#" << key.second;
    EXPECT_EQ(o.text, r.text) << key.first;
    EXPECT_EQ(o.reason, r.reason) << key.first;
    EXPECT_EQ(o.num_finished, 1) << key.first;
    EXPECT_EQ(o.usage.completion_tokens, r.usage.completion_tokens) << key.first;
  }
}

std::vector<SamplingParams> mixed_params(size_t n) {
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < n; ++i) params.push_back(params_for(i));
  return params;
}

TEST(OverlappedSteps, SameOutputsAsOneStepAtATime) {
  const std::vector<SamplingParams> params = mixed_params(14);
  const Outcome sync = run(false, {}, params);
  const Outcome overlapped = run(true, {}, params);
  expect_same(sync.results, overlapped.results);
  EXPECT_EQ(sync.launches, 0);
  EXPECT_EQ(overlapped.device_steps + overlapped.host_steps, 0) << "every step overlapped";
  EXPECT_GT(overlapped.fed_back, 0);
  EXPECT_EQ(overlapped.most_uncollected, 2) << "a step was launched while the one before ran";
  // Some sequences stopped early (EOS, a stop string), so some steps were planned and not needed.
  bool early = false;
  for (const auto& [key, r] : sync.results) early = early || r.reason == FinishReason::kStop;
  EXPECT_TRUE(early);
}

TEST(OverlappedSteps, PreemptionByRecomputeAndBySwap) {
  const std::vector<SamplingParams> params = mixed_params(14);
  for (const char* mode : {"recompute", "swap"}) {
    RunSetup setup;
    setup.num_blocks = 30;  // 120 token rows for up to 8 sequences of up to ~50 tokens
    setup.max_model_len = 100;
    setup.preemption_mode = mode;
    if (std::string(mode) == "swap") setup.host_swap_blocks = 64;
    const Outcome sync = run(false, setup, params);
    const Outcome overlapped = run(true, setup, params);
    EXPECT_GT(overlapped.preemptions, 0) << mode;
    expect_same(sync.results, overlapped.results);
    EXPECT_GT(overlapped.fed_back, 0) << mode;
  }
}

TEST(OverlappedSteps, SequencesThatReachTheContextEndTogether) {
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < 6; ++i) {
    SamplingParams p = greedy(1000);  // ended by the context, not max_tokens
    params.push_back(p);
  }
  RunSetup setup;
  setup.max_model_len = 40;
  const Outcome sync = run(false, setup, params);
  const Outcome overlapped = run(true, setup, params);
  expect_same(sync.results, overlapped.results);
  for (const auto& [key, r] : overlapped.results) EXPECT_EQ(r.reason, FinishReason::kLength) << key.first;
  // No sequence stops early here, so no step computes a row that is not needed.
  EXPECT_EQ(overlapped.forward_tokens, sync.forward_tokens);
  EXPECT_GT(overlapped.fed_back, 0);
}

TEST(OverlappedSteps, NoRowPastMaxTokens) {
  std::vector<SamplingParams> params;
  for (int64_t i = 0; i < 6; ++i) params.push_back(greedy(3 + 4 * i));
  const Outcome sync = run(false, {}, params);
  const Outcome overlapped = run(true, {}, params);
  expect_same(sync.results, overlapped.results);
  EXPECT_EQ(overlapped.forward_tokens, sync.forward_tokens);
}

TEST(OverlappedSteps, AnAbortWhileAStepIsInFlight) {
  const std::vector<SamplingParams> params = mixed_params(8);
  const Outcome whole = run(true, {}, params);
  for (int64_t after : {1, 2, 3, 5}) {
    const Outcome aborted = run(true, {}, params, after);
    const SeqResult& r3 = aborted.results.at({"r3", 0});
    EXPECT_EQ(r3.reason, FinishReason::kAbort) << after;
    EXPECT_EQ(r3.num_finished, 1) << after;
    // What r3 got is a prefix of what it would have got, and the others are untouched.
    const std::vector<int32_t>& full = whole.results.at({"r3", 0}).tokens;
    ASSERT_LE(r3.tokens.size(), full.size());
    EXPECT_TRUE(std::equal(r3.tokens.begin(), r3.tokens.end(), full.begin())) << after;
    for (const auto& [key, r] : whole.results)
      if (key.first != "r3") EXPECT_EQ(aborted.results.at(key).tokens, r.tokens) << after << " " << key.first;
  }
}

TEST(OverlappedSteps, RowsForTheHostSamplerRunOneStepAtATime) {
  std::vector<SamplingParams> params = mixed_params(6);
  params[2].logprobs = 2;                  // logits on the host
  params[4].repetition_penalty = 1.2f;     // the sequence's tokens on the host
  const Outcome sync = run(false, {}, params);
  const Outcome overlapped = run(true, {}, params);
  expect_same(sync.results, overlapped.results);
  EXPECT_GT(overlapped.host_steps, 0);
  // Once those two have finished, the rest overlap again.
  EXPECT_GT(overlapped.launches, 0);
}

TEST(OverlappedSteps, AbortUsageCountsOnlyDeliveredTokens) {
  const std::vector<SamplingParams> params = mixed_params(8);
  for (bool overlap : {false, true})
    for (int64_t after : {2, 3, 5}) {
      const Outcome aborted = run(overlap, {}, params, after);
      const SeqResult& r3 = aborted.results.at({"r3", 0});
      EXPECT_EQ(r3.usage.completion_tokens, static_cast<int64_t>(r3.tokens.size()))
          << "overlap " << overlap << " abort after " << after;
    }
}

TEST(OverlappedSteps, StageProfiledStepsStillHappen) {
  const std::vector<SamplingParams> params = mixed_params(14);
  for (int64_t interval : {1, 2, 3, 5}) {
    RunSetup setup;
    setup.stage_interval = interval;
    const Outcome sync = run(false, setup, params);
    const Outcome overlapped = run(true, setup, params);
    EXPECT_GT(sync.stage_requests, 0) << interval;
    EXPECT_GT(overlapped.stage_requests, sync.stage_requests / 2)
        << "interval " << interval << ": sync asked " << sync.stage_requests << ", overlapped " << overlapped.stage_requests
        << " (host steps " << overlapped.host_steps << " device steps " << overlapped.device_steps << ")";
  }
}

Results run_prefix(bool overlap, int64_t num_blocks) {
  RunSetup setup;
  setup.max_num_seqs = 6;
  setup.max_num_batched_tokens = 32;
  setup.max_model_len = 128;
  setup.num_blocks = num_blocks;
  QueuedDeviceRunner* device = nullptr;
  Engine engine = make_engine(overlap, setup, &device);
  Results results;
  size_t next = 0;
  for (int64_t step = 0; step < 5000; ++step) {
    if (next < 20 && step % 3 == 0) {  // arrivals while steps are in flight
      std::vector<int32_t> prompt;
      for (size_t t = 0; t < 13; ++t) prompt.push_back(static_cast<int32_t>(2 + (t * 7) % 50));  // shared prefix
      for (size_t t = 0; t < next % 5; ++t) prompt.push_back(static_cast<int32_t>(3 + next + t));
      SamplingParams p = params_for(next);
      p.stop.clear();
      if (next == 11) p.logprobs = 1;
      if (next == 14) p.repetition_penalty = 1.3f;
      engine.add_request("p" + std::to_string(next), prompt, p);
      ++next;
    }
    if (!engine.has_unfinished() && next >= 20) break;
    collect(engine.step(), results);
  }
  return results;
}

TEST(OverlappedSteps, PrefixCachingWithArrivals) {
  for (int64_t blocks : {256, 40}) {
    const Results sync = run_prefix(false, blocks);
    const Results overlapped = run_prefix(true, blocks);
    expect_same(sync, overlapped);
  }
}

TEST(OverlappedSteps, TurnedOnAndOffByAReloadBetweenSteps) {
  const std::vector<SamplingParams> params = mixed_params(14);
  const Outcome sync = run(false, {}, params);
  for (int64_t every : {1, 2, 5}) {
    const Outcome toggled = run(true, {}, params, -1, every);
    expect_same(sync.results, toggled.results);
    EXPECT_GT(toggled.launches, 0) << every;
    EXPECT_GT(toggled.device_steps, 0) << every;
  }
}

}  // namespace
}  // namespace optimate::testing
