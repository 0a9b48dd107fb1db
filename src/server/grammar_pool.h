// Compiles the grammars of structured-output requests off the network threads, so a slow
// compile never stalls /health or other clients.
//
// A few worker threads take compiles from a queue. The same grammar asked for by several
// requests at once is compiled once (they all wait on it), and a compiled grammar (or the
// reason it cannot be compiled) is kept in a cache bounded in bytes, so a repeated grammar
// costs nothing. A request waits at most `timeout_s`, then gets a 400 if its grammar's own
// compile ran that long, or a 503 (retry) if it waited behind other compiles; a compile whose
// clients have all gone (disconnected or timed out) is dropped while still queued. A running
// compile is the compile function's to stop (the server's stops those that can run long at
// the timeout: structured/grammar_workers.h); its result, or its error, is cached.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/token_constraint.h"
#include "structured/grammar_spec.h"

namespace optimate::server {

struct GrammarPoolOptions {
  int num_threads = 2;
  double timeout_s = 10.0;
  size_t max_queued = 256;               // compiles waiting beyond it: 503 with Retry-After
  size_t cache_bytes = size_t{256} << 20;
  // A thread answers clients whose wait is over. Off in tests, which call expire_overdue()
  // after moving a fake clock.
  bool watchdog = true;
};

using GrammarCompileFn =
    std::function<std::shared_ptr<const TokenConstraint>(const structured::GrammarSpec&)>;
// The compiled grammar, or why there is none (the compile's Error, an ApiError on timeout).
using GrammarDone = std::function<void(std::shared_ptr<const TokenConstraint>, std::exception_ptr)>;

class GrammarPool {
 public:
  // A request's place in the pool; cancel() withdraws it (its `done` is then never called).
  class Ticket {
   public:
    virtual ~Ticket() = default;
    virtual void cancel() = 0;
  };

  struct Stats {
    int64_t compiles = 0;    // compiles started
    int64_t cache_hits = 0;  // answered from the cache
    int64_t joined = 0;      // waited on a compile another request started
    int64_t timeouts = 0;
    int64_t dropped = 0;     // queued compiles dropped: nobody waited any more
    int64_t queued = 0;      // now
    int64_t running = 0;     // now
  };

  GrammarPool(GrammarCompileFn compile, GrammarPoolOptions options, const Clock& clock);
  ~GrammarPool();
  GrammarPool(const GrammarPool&) = delete;
  GrammarPool& operator=(const GrammarPool&) = delete;

  // Calls `done` exactly once unless cancelled: at once on this thread for a cached grammar,
  // else on a pool thread. Throws ApiError(503) when the queue is full.
  std::shared_ptr<Ticket> compile(const structured::GrammarSpec& spec, GrammarDone done);

  // Answers every client whose wait has passed timeout_s with a 400.
  void expire_overdue();
  Stats stats() const;

 private:
  struct Waiter;
  struct Job;
  class PoolTicket;
  struct CacheEntry {
    std::shared_ptr<const TokenConstraint> constraint;
    std::exception_ptr error;
    size_t bytes = 0;
    std::list<std::string>::iterator lru;
  };

  void work();
  void watch();
  void withdraw(const std::shared_ptr<Waiter>& waiter);
  void cache(const std::string& key, std::shared_ptr<const TokenConstraint> constraint, std::exception_ptr error);
  // `slow`: its own compile ran the whole timeout (400, the client's grammar); else it waited
  // behind others' compiles (503, retry).
  std::exception_ptr timeout_error(const structured::GrammarSpec& spec, bool slow) const;

  GrammarCompileFn compile_;
  GrammarPoolOptions options_;
  const Clock& clock_;
  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable watch_wake_;
  bool stopping_ = false;
  std::deque<std::shared_ptr<Job>> queue_;
  std::map<std::string, std::shared_ptr<Job>> in_flight_;  // queued or running, by grammar
  std::map<std::string, CacheEntry> cache_;
  std::list<std::string> lru_;  // most recent first
  size_t cache_used_bytes_ = 0;
  Stats stats_;
  std::vector<std::thread> workers_;
  std::thread watchdog_;
};

// The key two requests share a compiled grammar under: everything in the spec.
std::string grammar_key(const structured::GrammarSpec& spec);

}  // namespace optimate::server
