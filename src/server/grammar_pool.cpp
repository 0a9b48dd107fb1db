#include "server/grammar_pool.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "server/api_error.h"

namespace optimate::server {

using structured::GrammarSpec;

struct GrammarPool::Waiter {
  GrammarDone done;
  int64_t deadline_ns = 0;
  std::weak_ptr<Job> job;
  bool finished = false;  // answered or withdrawn; under the pool's mutex
};

struct GrammarPool::Job {
  std::string key;
  GrammarSpec spec;
  std::vector<std::shared_ptr<Waiter>> waiters;
  bool running = false;
  int64_t started_ns = 0;  // when a worker took it (running)
};

class GrammarPool::PoolTicket final : public Ticket {
 public:
  PoolTicket(GrammarPool* pool, std::weak_ptr<Waiter> waiter) : pool_(pool), waiter_(std::move(waiter)) {}
  void cancel() override {
    if (auto w = waiter_.lock()) pool_->withdraw(w);
  }

 private:
  GrammarPool* pool_;
  std::weak_ptr<Waiter> waiter_;
};

namespace {

class AnsweredTicket final : public GrammarPool::Ticket {
 public:
  void cancel() override {}
};

// What a cache entry counts at least: the key, the bookkeeping, an error's message.
constexpr size_t kEntryOverheadBytes = 1024;

}  // namespace

std::string grammar_key(const GrammarSpec& spec) {
  std::string key = fmt::format("{}|{}|{}:{}|{}:", static_cast<int>(spec.kind), spec.any_whitespace ? 1 : 0,
                                spec.field.size(), spec.field, spec.text.size());
  key += spec.text;
  for (const auto& c : spec.choices) key += fmt::format("|{}:", c.size()) + c;
  return key;
}

GrammarPool::GrammarPool(GrammarCompileFn compile, GrammarPoolOptions options, const Clock& clock)
    : compile_(std::move(compile)), options_(options), clock_(clock) {
  for (int i = 0; i < std::max(1, options_.num_threads); ++i) workers_.emplace_back([this] { work(); });
  if (options_.watchdog) watchdog_ = std::thread([this] { watch(); });
}

GrammarPool::~GrammarPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  watch_wake_.notify_all();
  for (auto& t : workers_) t.join();
  if (watchdog_.joinable()) watchdog_.join();
}

std::shared_ptr<GrammarPool::Ticket> GrammarPool::compile(const GrammarSpec& spec, GrammarDone done) {
  const std::string key = grammar_key(spec);
  std::unique_lock lock(mutex_);
  if (auto hit = cache_.find(key); hit != cache_.end()) {
    lru_.splice(lru_.begin(), lru_, hit->second.lru);
    ++stats_.cache_hits;
    auto constraint = hit->second.constraint;
    auto error = hit->second.error;
    lock.unlock();
    done(std::move(constraint), std::move(error));
    return std::make_shared<AnsweredTicket>();
  }
  auto waiter = std::make_shared<Waiter>();
  waiter->done = std::move(done);
  waiter->deadline_ns = clock_.now_ns() + static_cast<int64_t>(options_.timeout_s * 1e9);
  std::shared_ptr<Job> job;
  if (auto running = in_flight_.find(key); running != in_flight_.end()) {
    job = running->second;
    ++stats_.joined;
  } else {
    if (queue_.size() >= options_.max_queued)
      throw ApiError(503, fmt::format("{}: {} grammars are already waiting to be compiled. Retry later.",
                                      spec.field, queue_.size()))
          .with_retry_after(1);
    job = std::make_shared<Job>();
    job->key = key;
    job->spec = spec;
    queue_.push_back(job);
    in_flight_[key] = job;
    work_ready_.notify_one();
  }
  job->waiters.push_back(waiter);
  waiter->job = job;
  return std::make_shared<PoolTicket>(this, waiter);
}

void GrammarPool::withdraw(const std::shared_ptr<Waiter>& waiter) {
  std::lock_guard lock(mutex_);
  if (waiter->finished) return;
  waiter->finished = true;
  auto job = waiter->job.lock();
  if (!job) return;
  std::erase(job->waiters, waiter);
  if (!job->running && job->waiters.empty()) {
    std::erase(queue_, job);
    in_flight_.erase(job->key);
    ++stats_.dropped;
  }
}

void GrammarPool::expire_overdue() {
  const int64_t now = clock_.now_ns();
  std::vector<std::pair<std::shared_ptr<Waiter>, std::exception_ptr>> expired;
  {
    std::lock_guard lock(mutex_);
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      Job& job = *it->second;
      for (auto w = job.waiters.begin(); w != job.waiters.end();) {
        if ((*w)->deadline_ns > now) {
          ++w;
          continue;
        }
        (*w)->finished = true;
        // The grammar is slow only if its own compile has run the whole timeout; a wait spent
        // queued behind other compiles is the server's load, which the client may retry.
        const bool slow = job.running && now - job.started_ns >= static_cast<int64_t>(options_.timeout_s * 1e9);
        expired.emplace_back(*w, timeout_error(job.spec, slow));
        w = job.waiters.erase(w);
      }
      if (!job.running && job.waiters.empty()) {
        std::erase(queue_, it->second);
        ++stats_.dropped;
        it = in_flight_.erase(it);
      } else {
        ++it;
      }
    }
    stats_.timeouts += static_cast<int64_t>(expired.size());
  }
  for (auto& [waiter, error] : expired) waiter->done(nullptr, error);
}

std::exception_ptr GrammarPool::timeout_error(const GrammarSpec& spec, bool slow) const {
  if (!slow)
    return std::make_exception_ptr(
        ApiError(503, fmt::format("{}: the grammar compilers were busy with other requests' grammars for {:g} s "
                                  "(the server's --grammar-compile-timeout). Retry later.",
                                  spec.field, options_.timeout_s))
            .with_retry_after(1));
  return std::make_exception_ptr(ApiError(
      400,
      fmt::format("{}: the {} took longer than {:g} s to compile (the server's --grammar-compile-timeout); "
                  "simplify it",
                  spec.field, structured::grammar_kind_name(spec.kind), options_.timeout_s),
      spec.field));
}

GrammarPool::Stats GrammarPool::stats() const {
  std::lock_guard lock(mutex_);
  Stats s = stats_;
  s.queued = static_cast<int64_t>(queue_.size());
  return s;
}

void GrammarPool::work() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = queue_.front();
      queue_.pop_front();
      job->running = true;
      job->started_ns = clock_.now_ns();
      ++stats_.compiles;
      ++stats_.running;
    }
    std::shared_ptr<const TokenConstraint> constraint;
    std::exception_ptr error;
    try {
      constraint = compile_(job->spec);
    } catch (...) {
      error = std::current_exception();
    }
    std::vector<std::shared_ptr<Waiter>> waiters;
    {
      std::lock_guard lock(mutex_);
      --stats_.running;
      cache(job->key, constraint, error);
      in_flight_.erase(job->key);
      waiters = std::move(job->waiters);
      for (auto& w : waiters) w->finished = true;
    }
    for (auto& w : waiters) w->done(constraint, error);
  }
}

void GrammarPool::watch() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    watch_wake_.wait_for(lock, std::chrono::milliseconds(100));
    if (stopping_) break;
    lock.unlock();
    expire_overdue();
    lock.lock();
  }
}

void GrammarPool::cache(const std::string& key, std::shared_ptr<const TokenConstraint> constraint,
                        std::exception_ptr error) {
  const size_t bytes = kEntryOverheadBytes + 2 * key.size() + (constraint ? constraint->memory_bytes() : 0);
  if (bytes > options_.cache_bytes) return;
  if (auto old = cache_.find(key); old != cache_.end()) {
    cache_used_bytes_ -= old->second.bytes;
    lru_.erase(old->second.lru);
    cache_.erase(old);
  }
  lru_.push_front(key);
  cache_[key] = {std::move(constraint), std::move(error), bytes, lru_.begin()};
  cache_used_bytes_ += bytes;
  while (cache_used_bytes_ > options_.cache_bytes) {
    auto victim = cache_.find(lru_.back());
    cache_used_bytes_ -= victim->second.bytes;
    cache_.erase(victim);
    lru_.pop_back();
  }
}

}  // namespace optimate::server
