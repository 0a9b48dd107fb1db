// Prompt logprobs and grammar masks through the engine on the fake model: every prompt
// token's logprob equals the log-softmax of the logits the model gives for the prefix before
// it (asked of a fresh runner, one prefix at a time), however the prompt is chunked; a
// grammar's matcher sees every drawn token and only tokens it allows are drawn.
#include <cmath>

#include <gtest/gtest.h>

#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

// The fake model's logits after `prefix`, from a runner of its own.
std::vector<float> logits_after(const std::vector<int32_t>& prefix) {
  FakeModelRunner runner(64, 4);
  std::vector<int32_t> table;
  for (int32_t b = 0; b * 4 < static_cast<int32_t>(prefix.size()); ++b) table.push_back(b);
  ForwardBatch batch;
  batch.seqs.push_back({prefix, 0, table, true});
  std::vector<float> logits;
  runner.forward(batch, logits);
  return logits;
}

double log_softmax(const std::vector<float>& row, int32_t id) {
  double max = row[0], sum = 0;
  for (float v : row) max = std::max<double>(max, v);
  for (float v : row) sum += std::exp(v - max);
  return row[id] - max - std::log(sum);
}

std::vector<RequestOutput> run_all(Engine& engine) {
  std::vector<RequestOutput> all;
  while (engine.has_unfinished())
    for (auto& o : engine.step()) all.push_back(std::move(o));
  return all;
}

TEST(PromptLogprobsThroughEngine, MatchPrefixLogitsWhateverTheChunks) {
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 23; ++i) prompt.push_back(2 + (i * 13) % 60);
  for (int64_t budget : {64, 5}) {  // one chunk, then chunks of 5 tokens
    FakeEngineOptions o;
    o.max_num_batched_tokens = budget;
    Engine engine = make_fake_engine(o);
    SamplingParams p;
    p.max_tokens = 3;
    p.temperature = 0.0f;
    p.prompt_logprobs = 2;
    p.n = 2;
    engine.add_request("r", prompt, p);
    int64_t with_prompt_logprobs = 0;
    for (const RequestOutput& out : run_all(engine)) {
      if (out.prompt_logprobs.empty()) continue;
      ++with_prompt_logprobs;
      ASSERT_EQ(out.prompt_logprobs.size(), prompt.size() - 1) << "budget " << budget;
      for (size_t pos = 1; pos < prompt.size(); ++pos) {
        const auto& e = out.prompt_logprobs[pos - 1];
        const std::vector<float> row = logits_after({prompt.begin(), prompt.begin() + pos});
        EXPECT_EQ(e.sampled.token_id, prompt[pos]);
        EXPECT_NEAR(e.sampled.logprob, log_softmax(row, prompt[pos]), 1e-4) << "position " << pos;
        ASSERT_EQ(e.top.size(), 2u);
        EXPECT_GE(e.top[0].logprob, e.top[1].logprob);
        EXPECT_GE(e.top[0].logprob, e.sampled.logprob);
      }
    }
    EXPECT_EQ(with_prompt_logprobs, 2) << "each sample's first output carries them, budget " << budget;
  }
}

TEST(PromptLogprobsThroughEngine, SkipTheCachedPrefix) {
  Engine engine = make_fake_engine();
  std::vector<int32_t> prompt(20, 7);
  SamplingParams plain;
  plain.max_tokens = 1;
  engine.add_request("warm", prompt, plain);
  run_all(engine);
  SamplingParams p = plain;
  p.prompt_logprobs = 0;
  engine.add_request("scored", prompt, p);
  bool seen = false;
  for (const RequestOutput& out : run_all(engine))
    if (out.request_id == "scored" && !out.prompt_logprobs.empty()) {
      seen = true;
      EXPECT_EQ(out.prompt_logprobs.size(), prompt.size() - 1);
    }
  EXPECT_TRUE(seen);
}

// Allows exactly the tokens of `script` in order, then only the fake model's EOS (or, with
// `dead_end`, no token at all).
class ScriptConstraint final : public TokenConstraint {
 public:
  explicit ScriptConstraint(std::vector<int32_t> script, bool dead_end = false)
      : script_(std::move(script)), dead_end_(dead_end) {}
  std::string describe() const override { return "script"; }
  std::unique_ptr<TokenMatcher> new_matcher() const override {
    struct Matcher final : TokenMatcher {
      const std::vector<int32_t>* script;
      bool dead_end = false;
      size_t at = 0;
      bool done = false;
      void fill_next_token_mask(std::span<uint32_t> mask) override {
        std::fill(mask.begin(), mask.end(), 0u);
        if (dead_end && at == script->size()) return;
        const int32_t next = at < script->size() ? (*script)[at] : FakeModelRunner::kEos;
        mask[next >> 5] |= 1u << (next & 31);
      }
      bool accept_token(int32_t id) override {
        const int32_t next = at < script->size() ? (*script)[at] : FakeModelRunner::kEos;
        if (id != next || (dead_end && at == script->size())) return false;
        done = at++ == script->size();
        return true;
      }
      bool is_terminated() const override { return done; }
    };
    auto m = std::make_unique<Matcher>();
    m->script = &script_;
    m->dead_end = dead_end_;
    return m;
  }

 private:
  std::vector<int32_t> script_;
  bool dead_end_;
};

TEST(GrammarThroughEngine, DrawsOnlyWhatTheGrammarAllowsThenEnds) {
  Engine engine = make_fake_engine();
  const std::vector<int32_t> script = {9, 40, 3, 3, 17};
  SamplingParams p;
  p.max_tokens = 20;
  p.n = 3;  // each sample has a matcher of its own
  p.constraint = std::make_shared<ScriptConstraint>(script);
  engine.add_request("g", {5, 6, 7}, p);
  Results results = run_to_completion(engine);
  for (int64_t i = 0; i < 3; ++i) {
    const SeqResult& r = results[{"g", i}];
    std::vector<int32_t> want = script;
    want.push_back(FakeModelRunner::kEos);
    EXPECT_EQ(r.tokens, want) << "sample " << i;
    EXPECT_EQ(r.reason, FinishReason::kStop);
  }
}

// Also when its end token is the last max_tokens allows: the output is whole, a stop (a client
// reading "length" would take a complete structured output for a cut one).
TEST(GrammarThroughEngine, EndsWhenTheGrammarEndsEvenIgnoringEos) {
  for (const int64_t max_tokens : {20, 2}) {
    Engine engine = make_fake_engine();
    SamplingParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.constraint = std::make_shared<ScriptConstraint>(std::vector<int32_t>{12});
    engine.add_request("g", {5}, p);
    Results results = run_to_completion(engine);
    const auto& g = results[std::make_pair(std::string("g"), int64_t{0})];
    EXPECT_EQ(g.tokens, (std::vector<int32_t>{12, FakeModelRunner::kEos})) << max_tokens;
    EXPECT_EQ(g.reason, FinishReason::kStop) << max_tokens;
  }
}

// A grammar that leads where nothing may follow leaves the sampler an empty mask: whatever it
// draws is refused, and the sequence ends there without it (the client never sees a token
// outside its grammar), counted as not generated.
TEST(GrammarThroughEngine, AnEmptyMaskEndsTheSequenceWithoutTheRefusedToken) {
  Engine engine = make_fake_engine();
  SamplingParams p;
  p.max_tokens = 20;
  p.logprobs = 2;
  p.constraint = std::make_shared<ScriptConstraint>(std::vector<int32_t>{9, 40}, /*dead_end=*/true);
  engine.add_request("g", {5, 6}, p);
  std::vector<int32_t> tokens;
  size_t num_logprobs = 0;
  RequestOutput last;
  while (engine.has_unfinished())
    for (RequestOutput& o : engine.step()) {
      tokens.insert(tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      num_logprobs += o.logprobs.size();
      last = std::move(o);
    }
  EXPECT_EQ(tokens, (std::vector<int32_t>{9, 40}));
  EXPECT_EQ(num_logprobs, 2u);
  EXPECT_TRUE(last.finished);
  EXPECT_EQ(last.finish_reason, FinishReason::kAbort);
  EXPECT_EQ(last.usage.completion_tokens, 2);
}

}  // namespace
}  // namespace optimate::testing
