#include <gtest/gtest.h>

#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

TEST(EngineApi, DuplicateIdAndBadParamsAreErrors) {
  Engine engine = make_fake_engine();
  engine.add_request("a", std::vector<int32_t>{3, 4, 5}, greedy(4));
  try {
    engine.add_request("a", std::vector<int32_t>{3}, greedy(4));
    FAIL() << "duplicate id accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'a'"), std::string::npos) << e.what();
  }
  SamplingParams bad = greedy(4);
  bad.top_p = 1.5f;
  EXPECT_THROW(engine.add_request("b", std::vector<int32_t>{3}, bad), Error);
  EXPECT_THROW(engine.add_request("c", std::vector<int32_t>{}, greedy(4)), Error);
  EXPECT_THROW(engine.add_request("d", std::vector<int32_t>{3, 999}, greedy(4)), Error);
  EXPECT_THROW(engine.add_request("e", std::vector<int32_t>(300, 3), greedy(4)), Error);
  // Once finished, the id may be used again.
  run_to_completion(engine);
  EXPECT_NO_THROW(engine.add_request("a", std::vector<int32_t>{3}, greedy(1)));
}

// allowed_token_ids of only tokens that end the sequence, with min_tokens: nothing could be
// drawn for the first tokens (before, a token outside the allowed set was). One other allowed
// token makes it a fine request.
TEST(EngineApi, AllowedTokensThatOnlyEndTheSequenceWithMinTokensAreAnError) {
  Engine engine = make_fake_engine();
  SamplingParams p = greedy(4);
  p.ignore_eos = false;
  p.min_tokens = 2;
  p.stop_token_ids = {9};
  p.allowed_token_ids = {FakeModelRunner::kEos, 9};
  try {
    engine.add_request("a", std::vector<int32_t>{3, 4}, p);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("min_tokens"), std::string::npos) << e.what();
  }
  p.allowed_token_ids.push_back(11);
  engine.add_request("b", std::vector<int32_t>{3, 4}, p);
  const SeqResult r = run_to_completion(engine).at({"b", 0});
  EXPECT_EQ(r.tokens[0], 11);
  EXPECT_EQ(r.tokens[1], 11);
}

TEST(EngineApi, MaxTokensUsageAndText) {
  Engine engine = make_fake_engine();
  engine.add_request("t", std::string("hello"), greedy(6));
  const Results r = run_to_completion(engine);
  const SeqResult& s = r.at({"t", 0});
  ASSERT_EQ(s.tokens.size(), 6u);
  EXPECT_EQ(s.reason, FinishReason::kLength);
  EXPECT_EQ(s.usage.prompt_tokens, 5);
  EXPECT_EQ(s.usage.completion_tokens, 6);
  std::string text;
  for (int32_t t : s.tokens) text += FakeCodec::piece(t);
  EXPECT_EQ(s.text, text);
}

TEST(EngineApi, EosStopsUnlessIgnoredAndNotBeforeMinTokens) {
  // Find a prompt whose greedy continuation hits EOS early.
  for (int salt = 0; salt < 500; ++salt) {
    std::vector<int32_t> prompt = {2 + salt % 60, 2 + (salt / 60) % 60, 7};
    Engine engine = make_fake_engine();
    SamplingParams p = greedy(40);
    p.ignore_eos = false;
    engine.add_request("e", prompt, p);
    const SeqResult s = run_to_completion(engine).at({"e", 0});
    if (s.reason != FinishReason::kStop || s.tokens.size() > 20) continue;
    EXPECT_EQ(s.tokens.back(), FakeModelRunner::kEos);
    // The EOS token is reported but is not text.
    EXPECT_EQ(s.text.size(), 2 * (s.tokens.size() - 1));

    Engine ignoring = make_fake_engine();
    ignoring.add_request("e", prompt, greedy(40));
    EXPECT_EQ(run_to_completion(ignoring).at({"e", 0}).tokens.size(), 40u);

    Engine min_tokens = make_fake_engine();
    SamplingParams m = greedy(40);
    m.ignore_eos = false;
    m.min_tokens = static_cast<int64_t>(s.tokens.size()) + 2;
    min_tokens.add_request("e", prompt, m);
    const SeqResult sm = run_to_completion(min_tokens).at({"e", 0});
    EXPECT_GE(static_cast<int64_t>(sm.tokens.size()), m.min_tokens);
    for (size_t i = 0; i + 1 < sm.tokens.size(); ++i) EXPECT_NE(sm.tokens[i], FakeModelRunner::kEos);
    return;
  }
  FAIL() << "no prompt reached EOS";
}

TEST(EngineApi, StopTokenIdsAndStopStringsAcrossTokens) {
  const std::vector<int32_t> prompt = {9, 8, 7, 6, 5};
  Engine base = make_fake_engine();
  base.add_request("b", prompt, greedy(20));
  const SeqResult full = run_to_completion(base).at({"b", 0});

  Engine by_token = make_fake_engine();
  SamplingParams st = greedy(20);
  st.stop_token_ids = {full.tokens[5]};
  by_token.add_request("s", prompt, st);
  const SeqResult t = run_to_completion(by_token).at({"s", 0});
  EXPECT_EQ(t.reason, FinishReason::kStop);
  EXPECT_EQ(t.tokens.back(), full.tokens[5]);

  // "xY" + "zW" pieces: a stop string from the middle of token 3 to the middle of token 4.
  const std::string stop = full.text.substr(7, 3);
  const size_t first = full.text.find(stop);
  Engine by_string = make_fake_engine();
  SamplingParams ss = greedy(20);
  ss.stop = {stop};
  by_string.add_request("s", prompt, ss);
  const SeqResult s = run_to_completion(by_string).at({"s", 0});
  EXPECT_EQ(s.reason, FinishReason::kStop);
  EXPECT_EQ(s.text, full.text.substr(0, first));

  Engine keep = make_fake_engine();
  ss.include_stop_str_in_output = true;
  keep.add_request("s", prompt, ss);
  EXPECT_EQ(run_to_completion(keep).at({"s", 0}).text, full.text.substr(0, first + stop.size()));
  EXPECT_EQ(keep.scheduler().kv().pool().num_free_blocks(), 256);
}

TEST(EngineApi, AbortReportsOnceAndFreesBlocks) {
  Engine engine = make_fake_engine();
  engine.add_request("a", std::vector<int32_t>(30, 4), greedy(50));
  engine.step();
  engine.step();
  EXPECT_TRUE(engine.abort("a"));
  EXPECT_FALSE(engine.abort("a"));
  EXPECT_FALSE(engine.abort("never"));
  const auto outs = engine.step();
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_TRUE(outs[0].finished);
  EXPECT_EQ(outs[0].finish_reason, FinishReason::kAbort);
  EXPECT_FALSE(engine.has_unfinished());
  EXPECT_EQ(engine.scheduler().kv().pool().num_free_blocks(), 256);
}

TEST(EngineApi, LogprobsArePlumbedThrough) {
  Engine engine = make_fake_engine();
  SamplingParams p = greedy(3);
  p.logprobs = 2;
  engine.add_request("l", std::vector<int32_t>{3, 4}, p);
  std::vector<RequestOutput> all;
  while (engine.has_unfinished())
    for (auto& o : engine.step()) all.push_back(o);
  ASSERT_EQ(all.size(), 3u);
  for (const auto& o : all) {
    ASSERT_EQ(o.logprobs.size(), 1u);
    EXPECT_EQ(o.logprobs[0].sampled.token_id, o.new_token_ids[0]);
    ASSERT_EQ(o.logprobs[0].top.size(), 2u);
    // Greedy: the sampled token is the most likely one.
    EXPECT_EQ(o.logprobs[0].top[0].token_id, o.new_token_ids[0]);
    EXPECT_EQ(o.logprobs[0].sampled.rank, 1);
    EXPECT_LE(o.logprobs[0].sampled.logprob, 0.0f);
  }
}

TEST(EngineApi, LowerFirstClientsOrdinaryWorkRunsBeforeBackground) {
  // vLLM's rule: 0 is ordinary, 5 is background. With one slot and the priority optimizer at
  // its defaults, the ordinary request added last runs before the background one. A front end
  // converts the clients' values as the engine's priority_order says.
  FakeEngineOptions options;
  options.max_num_seqs = 1;
  options.priority_order = PriorityOrder::kLowerFirst;
  options.optimizers = {{"priority", {{"preempt", false}}}};
  Engine engine = make_fake_engine(options);
  engine.add_request("busy", std::vector<int32_t>{3, 4}, greedy(2));
  engine.step();
  const auto client = [&](int64_t p) { return to_engine_priority(engine.config().priority_order, ClientPriority{p}); };
  engine.add_request("background", std::vector<int32_t>{3, 4}, greedy(2), {.priority = client(5)});
  engine.add_request("ordinary", std::vector<int32_t>{3, 4}, greedy(2), {.priority = client(0)});
  std::vector<std::string> finished;
  while (engine.has_unfinished())
    for (const auto& o : engine.step())
      if (o.finished) finished.push_back(o.request_id);
  EXPECT_EQ(finished, (std::vector<std::string>{"busy", "ordinary", "background"}));
}

TEST(EngineApi, LimitsStopAtWhatTheRunnerAllocated) {
  auto make = [](int64_t max_num_seqs) {
    EngineConfig c;
    c.max_num_seqs = max_num_seqs;
    c.max_num_batched_tokens = 64;
    c.max_model_len = 128;
    c.block_size = 4;
    auto runner = std::make_unique<FakeModelRunner>(64, 4);
    runner->set_capacity({.max_num_seqs = 8, .max_num_batched_tokens = 64, .max_model_len = 256});
    EngineParts parts;
    parts.runner = std::move(runner);
    parts.codec = std::make_shared<FakeCodec>();
    parts.clock = std::make_shared<FakeClock>();
    return Engine(c, std::move(parts));
  };
  EXPECT_THROW(make(16), Error);  // more sequences than the runner's buffers hold
  Engine engine = make(8);
  EXPECT_EQ(engine.limits().max_num_seqs, 8);
  EXPECT_EQ(engine.limits().max_model_len, 128);
  engine.set_limits(4, 32);
  EXPECT_EQ(engine.limits().max_num_seqs, 4);
  EXPECT_EQ(engine.limits().max_num_batched_tokens, 32);
  try {
    engine.set_limits(9, 32);
    FAIL() << "a limit past the runner's allocation was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("max-num-seqs 9"), std::string::npos) << e.what();
  }
  EXPECT_THROW(engine.set_limits(4, 65), Error);
  EXPECT_THROW(engine.set_limits(0, 32), Error);
  // Nothing changed, and the engine still runs.
  EXPECT_EQ(engine.limits().max_num_seqs, 4);
  EXPECT_EQ(engine.limits().max_num_batched_tokens, 32);
  engine.add_request("a", std::vector<int32_t>{3, 4, 5}, greedy(3));
  const Results r = run_to_completion(engine);
  EXPECT_EQ(r.at({"a", 0}).tokens.size(), 3u);
}

TEST(EngineApi, UnknownOptimizerIsAnError) {
  FakeEngineOptions o;
  o.optimizers = {OptimizerSpec{"no-such-optimizer", {}}};
  try {
    make_fake_engine(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("fcfs"), std::string::npos) << e.what();
  }
  o.optimizers = {OptimizerSpec{"fcfs", {{"levels", int64_t{3}}}}};
  EXPECT_THROW(make_fake_engine(o), Error);
}

}  // namespace
}  // namespace optimate::testing
