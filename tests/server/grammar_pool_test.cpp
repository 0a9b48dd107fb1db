// The grammar pool on its own: a repeated grammar compiles once (cached, or joined while in
// flight), a withdrawn request's queued compile is dropped, an overdue wait is answered with a
// 400 on a fake clock while its compile goes on and is cached (a 503 for one queued behind it),
// and a full queue is a 503.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "server/api_error.h"
#include "server/grammar_pool.h"

namespace optimate::server {
namespace {

using structured::GrammarKind;
using structured::GrammarSpec;

struct Compiled final : TokenConstraint {
  std::unique_ptr<TokenMatcher> new_matcher() const override { return nullptr; }
  std::string describe() const override { return "test"; }
};

// A compile function that blocks while held and counts what it compiled.
class SlowCompiler {
 public:
  std::shared_ptr<const TokenConstraint> operator()(const GrammarSpec& spec) {
    std::unique_lock lock(mutex_);
    ++started_[spec.text];
    ++running_;
    changed_.notify_all();
    changed_.wait(lock, [this] { return !held_; });
    --running_;
    if (spec.text == "bad") throw Error(ErrorCode::kInvalidArgument, spec.field + ": cannot be compiled");
    return std::make_shared<Compiled>();
  }
  void hold(bool on) {
    std::lock_guard lock(mutex_);
    held_ = on;
    changed_.notify_all();
  }
  void wait_running(int n) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return running_ >= n; });
  }
  int started(const std::string& text) {
    std::lock_guard lock(mutex_);
    return started_[text];
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool held_ = false;
  int running_ = 0;
  std::map<std::string, int> started_;
};

GrammarSpec spec(std::string text) { return {GrammarKind::kRegex, std::move(text), {}, true, "guided_regex"}; }

// What a request got: the constraint or the error's status and message.
struct Outcome {
  std::promise<std::pair<int, std::string>> promise;
  GrammarDone done() {
    return [this](std::shared_ptr<const TokenConstraint> c, std::exception_ptr e) {
      if (!e) return promise.set_value({c ? 200 : 0, ""});
      try {
        std::rethrow_exception(e);
      } catch (const ApiError& a) {
        promise.set_value({a.status(), a.message()});
      } catch (const Error& x) {
        promise.set_value({400, x.what()});
      }
    };
  }
  std::pair<int, std::string> get() { return promise.get_future().get(); }
};

GrammarPoolOptions options(int threads, size_t max_queued = 256) {
  GrammarPoolOptions o;
  o.num_threads = threads;
  o.timeout_s = 10;
  o.max_queued = max_queued;
  o.watchdog = false;
  return o;
}

TEST(GrammarPool, ARepeatedGrammarCompilesOnceAndIsThenCached) {
  SlowCompiler compiler;
  FakeClock clock;
  GrammarPool pool(std::ref(compiler), options(2), clock);
  compiler.hold(true);
  Outcome first, second;
  pool.compile(spec("a+"), first.done());
  pool.compile(spec("a+"), second.done());  // joins the compile in flight
  compiler.hold(false);
  EXPECT_EQ(first.get().first, 200);
  EXPECT_EQ(second.get().first, 200);
  Outcome third;
  pool.compile(spec("a+"), third.done());  // from the cache, at once
  EXPECT_EQ(third.get().first, 200);
  EXPECT_EQ(compiler.started("a+"), 1);
  const auto s = pool.stats();
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.joined, 1);
  EXPECT_EQ(s.cache_hits, 1);
  // A grammar that cannot be compiled is remembered too, with its reason.
  Outcome bad1, bad2;
  pool.compile(spec("bad"), bad1.done());
  EXPECT_EQ(bad1.get().first, 400);
  pool.compile(spec("bad"), bad2.done());
  EXPECT_EQ(bad2.get().second, "guided_regex: cannot be compiled");
  EXPECT_EQ(compiler.started("bad"), 1);
}

TEST(GrammarPool, AWithdrawnRequestsQueuedCompileIsDropped) {
  SlowCompiler compiler;
  FakeClock clock;
  GrammarPool pool(std::ref(compiler), options(1), clock);
  compiler.hold(true);
  Outcome running, queued;
  pool.compile(spec("running"), running.done());
  compiler.wait_running(1);
  auto ticket = pool.compile(spec("queued"), queued.done());
  EXPECT_EQ(pool.stats().queued, 1);
  ticket->cancel();  // the client went away
  EXPECT_EQ(pool.stats().queued, 0);
  EXPECT_EQ(pool.stats().dropped, 1);
  compiler.hold(false);
  EXPECT_EQ(running.get().first, 200);
  Outcome after;
  pool.compile(spec("after"), after.done());
  EXPECT_EQ(after.get().first, 200);
  EXPECT_EQ(compiler.started("queued"), 0);  // never compiled
}

// The slow grammar's own request gets a 400 (simplify it); one that waited behind it in the
// queue gets a 503 to retry, the server being busy rather than its grammar slow.
TEST(GrammarPool, AnOverdueWaitIsA400ForTheSlowGrammarA503BehindItAndTheCompileIsStillCached) {
  SlowCompiler compiler;
  FakeClock clock;
  GrammarPoolOptions o = options(1);
  o.timeout_s = 5;
  GrammarPool pool(std::ref(compiler), o, clock);
  compiler.hold(true);
  Outcome slow, queued;
  pool.compile(spec("slow"), slow.done());
  compiler.wait_running(1);
  pool.compile(spec("queued"), queued.done());  // one thread: it waits for "slow"
  clock.advance_ms(4'999);
  pool.expire_overdue();
  EXPECT_EQ(pool.stats().timeouts, 0);
  clock.advance_ms(2);
  pool.expire_overdue();
  const auto [status, message] = slow.get();
  EXPECT_EQ(status, 400);
  EXPECT_NE(message.find("guided_regex: the regex took longer than 5 s to compile"), std::string::npos) << message;
  const auto [queued_status, queued_message] = queued.get();
  EXPECT_EQ(queued_status, 503) << queued_message;
  EXPECT_NE(queued_message.find("Retry later"), std::string::npos) << queued_message;
  // The compile cannot be stopped: it ends, and the next request for it costs nothing.
  compiler.hold(false);
  for (int i = 0; i < 1000 && pool.stats().running > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  Outcome again;
  pool.compile(spec("slow"), again.done());
  EXPECT_EQ(again.get().first, 200);
  EXPECT_EQ(compiler.started("slow"), 1);
  EXPECT_EQ(pool.stats().cache_hits, 1);
}

TEST(GrammarPool, AFullQueueIsA503) {
  SlowCompiler compiler;
  FakeClock clock;
  GrammarPool pool(std::ref(compiler), options(1, /*max_queued=*/1), clock);
  compiler.hold(true);
  Outcome a, b;
  pool.compile(spec("a"), a.done());
  compiler.wait_running(1);
  pool.compile(spec("b"), b.done());
  try {
    Outcome c;
    pool.compile(spec("c"), c.done());
    FAIL() << "queued past the bound";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 503);
    EXPECT_EQ(e.retry_after_s(), 1);
  }
  compiler.hold(false);
  EXPECT_EQ(a.get().first, 200);
  EXPECT_EQ(b.get().first, 200);
}

}  // namespace
}  // namespace optimate::server
