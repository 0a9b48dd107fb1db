#include "backend/cpu/cpu_thread_pool.h"

#include <immintrin.h>
#include <sched.h>

#include <algorithm>
#include <utility>

namespace optimate::cpu {
namespace {

// Spins before a worker sleeps: about the gap between two jobs of one forward pass, so a
// decode step's jobs find the workers awake, and a worker idle between requests costs no CPU.
constexpr int kSpinsBeforeSleep = 1 << 11;
// Spins of the calling thread waiting for the last chunks before it yields its core to them.
constexpr int kSpinsBeforeYield = 1 << 10;

}  // namespace

int available_processors() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

CpuThreadPool::CpuThreadPool(int num_threads) {
  const int n = num_threads > 0 ? num_threads : available_processors();
  for (int t = 1; t < n; ++t) workers_.emplace_back([this, t] { work(t); });
}

CpuThreadPool::~CpuThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void CpuThreadPool::drain(uint32_t generation, int thread) {
  // A successful claim of (generation, i < num_chunks) means this job is not done, so the
  // caller has not moved on and thunk_/fn_ are still this job's.
  uint64_t t = ticket_.load();
  for (;;) {
    if (static_cast<uint32_t>(t >> 32) != generation || static_cast<int64_t>(t & 0xFFFFFFFFu) >= num_chunks_.load()) return;
    if (!ticket_.compare_exchange_weak(t, t + 1)) continue;
    try {
      thunk_.load()(fn_.load(), static_cast<int64_t>(t & 0xFFFFFFFFu), thread);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    done_.fetch_add(1);
    t = ticket_.load();
  }
}

void CpuThreadPool::run_job(int64_t num_chunks, Thunk thunk, const void* fn) {
  const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  // The ticket moves to the new generation before the job is published: a worker still holding
  // the previous generation can no longer claim anything.
  ticket_.store(static_cast<uint64_t>(generation) << 32);
  thunk_.store(thunk);
  fn_.store(fn);
  num_chunks_.store(num_chunks);
  done_.store(0);
  generation_.store(generation);
  generation_.notify_all();
  drain(generation, 0);
  for (int spins = 0; done_.load(std::memory_order_acquire) < num_chunks; ++spins) {
    if (spins < kSpinsBeforeYield) _mm_pause();
    else std::this_thread::yield();  // a worker holding a chunk may need this core
  }
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void CpuThreadPool::work(int thread) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    for (int spins = 0; g == seen && spins < kSpinsBeforeSleep; ++spins) {
      _mm_pause();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = g;
    if (stop_.load()) return;
    drain(g, thread);
  }
}

}  // namespace optimate::cpu
