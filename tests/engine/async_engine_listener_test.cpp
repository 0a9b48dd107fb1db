// The server's side of the AsyncEngine: outputs pushed to a listener on the engine thread,
// tasks run between steps, and the stats snapshot that feeds /metrics and the queue limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "engine/async_engine.h"
#include "engine/engine_test_util.h"

namespace optimate::testing {
namespace {

struct Collected {
  std::mutex mu;
  Results results;
  std::promise<void> done;
  int64_t num_open = 0;
  std::optional<std::string> error;
};

RequestListener listener_for(Collected& c) {
  return {[&c](RequestOutput out) {
            std::lock_guard lock(c.mu);
            const bool finished = out.finished;
            collect({out}, c.results);
            if (finished && --c.num_open == 0) c.done.set_value();
          },
          [&c](const Error& e) {
            std::lock_guard lock(c.mu);
            c.error = e.what();
            c.done.set_value();
          }};
}

TEST(AsyncEngineListener, DeliversTheSameOutputsAsASynchronousEngine) {
  Engine reference = make_fake_engine();
  reference.add_request("r", std::vector<int32_t>{5, 6, 7}, greedy(6, 2));
  const Results expected = run_to_completion(reference);

  Collected c;  // outlives the engine thread that fills it
  AsyncEngine engine(make_fake_engine());
  c.num_open = 2;
  auto stream = engine.submit("r", std::vector<int32_t>{5, 6, 7}, greedy(6, 2), {}, listener_for(c));
  ASSERT_EQ(c.done.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  std::lock_guard lock(c.mu);
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(c.results.at({"r", i}).tokens, expected.at({"r", i}).tokens);
    EXPECT_EQ(c.results.at({"r", i}).text, expected.at({"r", i}).text);
    EXPECT_EQ(c.results.at({"r", i}).num_finished, 1);
  }
  EXPECT_TRUE(stream->finished());
}

TEST(AsyncEngineListener, ReportsRequestsTheEngineRefuses) {
  Collected c;
  AsyncEngine engine(make_fake_engine({.max_model_len = 8}));
  engine.submit("long", std::vector<int32_t>(20, 3), greedy(4), {}, listener_for(c));
  ASSERT_EQ(c.done.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  std::lock_guard lock(c.mu);
  ASSERT_TRUE(c.error.has_value());
}

TEST(AsyncEngineListener, StatsShowHeldBlocksUntilAbortFreesThem) {
  // Everything the engine thread's callbacks touch is declared before the engine, so it
  // outlives the thread even when an assertion ends the test early.
  std::mutex mu;
  std::vector<EngineStats> seen;
  Collected c;
  int64_t num_tokens = 0;
  AsyncEngine engine(make_fake_engine({.num_blocks = 64, .block_size = 4}));
  engine.set_stats_listener([&](const EngineStats& s) {
    std::lock_guard lock(mu);
    seen.push_back(s);
  });
  // The abort is sent from the listener after the third token, so it reaches the engine long
  // before the request could end on its own, however the threads are scheduled.
  c.num_open = 1;
  RequestListener forward = listener_for(c);
  RequestListener aborting{[&engine, &num_tokens, forward](RequestOutput out) {
                             num_tokens += static_cast<int64_t>(out.new_token_ids.size());
                             if (num_tokens >= 3 && !out.finished) engine.abort("r");
                             forward.on_output(std::move(out));
                           },
                           forward.on_error};
  engine.submit("r", std::vector<int32_t>{1, 2, 3, 4, 5}, greedy(100000), {.priority = {3}}, aborting);
  ASSERT_EQ(c.done.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(c.results.at({"r", 0}).reason, FinishReason::kAbort);

  std::unique_lock lock(mu);
  const auto running = std::find_if(seen.begin(), seen.end(), [](const EngineStats& s) {
    return s.num_running == 1 && s.num_generation_tokens >= 2;
  });
  ASSERT_NE(running, seen.end()) << "no snapshot taken while the request ran";
  EXPECT_EQ(running->kv_total_blocks, 64);
  EXPECT_GE(running->kv_used_blocks, 2);
  EXPECT_EQ(running->num_prompt_tokens, 5);
  lock.unlock();
  // Stats are published after the step's outputs are delivered: wait for that snapshot.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (engine.stats().num_running != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const EngineStats after = engine.stats();
  EXPECT_EQ(after.num_running, 0);
  EXPECT_EQ(after.num_waiting, 0);
  EXPECT_EQ(after.kv_used_blocks, 0);
}

TEST(AsyncEngineListener, WaitingRequestsAreCountedByPriority) {
  // A long first request keeps the only slot busy while the other two wait.
  std::mutex mu;
  std::vector<EngineStats> seen;
  Collected a, b, d;
  AsyncEngine engine(make_fake_engine({.num_blocks = 2048, .max_num_seqs = 1, .max_model_len = 8192}));
  engine.set_stats_listener([&](const EngineStats& s) {
    std::lock_guard lock(mu);
    seen.push_back(s);
  });
  a.num_open = b.num_open = d.num_open = 1;
  engine.submit("a", std::vector<int32_t>{1, 2}, greedy(8000), {.priority = {0}}, listener_for(a));
  engine.submit("b", std::vector<int32_t>{1, 3}, greedy(8000), {.priority = {5}}, listener_for(b));
  engine.submit("d", std::vector<int32_t>{1, 4}, greedy(8000), {.priority = {5}}, listener_for(d));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (engine.stats().num_waiting < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  engine.shutdown(ShutdownMode::kAbort);
  std::lock_guard lock(mu);
  const auto both_waiting = std::find_if(seen.begin(), seen.end(), [](const EngineStats& s) {
    return s.num_waiting == 2;
  });
  ASSERT_NE(both_waiting, seen.end()) << "no snapshot with both requests waiting";
  EXPECT_EQ(both_waiting->num_running, 1);
  EXPECT_EQ(both_waiting->num_waiting_by_priority, (std::map<EnginePriority, int64_t>{{EnginePriority{5}, 2}}));
}

TEST(AsyncEngineListener, TasksRunOnTheEngineThreadBetweenSteps) {
  AsyncEngine engine(make_fake_engine());
  std::promise<std::thread::id> ran;
  engine.run_on_engine([&](Engine& e) {
    EXPECT_FALSE(e.has_unfinished());
    ran.set_value(std::this_thread::get_id());
  });
  auto f = ran.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_NE(f.get(), std::this_thread::get_id());
}

}  // namespace
}  // namespace optimate::testing
