// The CPU backend's threads: a job is a number of small chunks that the calling thread and the
// pool's workers claim one at a time, and a job is done when its chunks are, not when every
// thread has arrived at a barrier.
//
// Why not OpenMP's fork/join: on a machine whose cores are shared (other processes, the
// server's own HTTP threads), a worker is sometimes not running when a parallel region starts;
// an OpenMP barrier then holds the step until the OS schedules it again, once per region and a
// few hundred regions per forward pass. Measured on the 2-core development machine under load:
// a 128-token prefill took 4x longer on 2 OpenMP threads than on one. Here a worker that is not
// running simply takes no chunks, and the others (the caller included) do its share.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace optimate::cpu {

class CpuThreadPool {
 public:
  // num_threads counts the calling thread: num_threads - 1 workers are started. 0: one per
  // processor this process may run on.
  explicit CpuThreadPool(int num_threads = 0);
  ~CpuThreadPool();
  CpuThreadPool(const CpuThreadPool&) = delete;
  CpuThreadPool& operator=(const CpuThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(chunk, thread) for every chunk in [0, num_chunks), thread being a number below
  // num_threads() unique among the threads running chunks at once (an index into per-thread
  // scratch). Returns when every chunk has returned, rethrowing the first exception a chunk
  // threw. Not reentrant: fn must not call run.
  template <typename Fn>
  void run(int64_t num_chunks, const Fn& fn) {
    if (num_chunks <= 0) return;
    if (num_chunks == 1 || workers_.empty()) {
      for (int64_t c = 0; c < num_chunks; ++c) fn(c, 0);
      return;
    }
    run_job(num_chunks, [](const void* f, int64_t c, int t) { (*static_cast<const Fn*>(f))(c, t); }, &fn);
  }

 private:
  using Thunk = void (*)(const void* fn, int64_t chunk, int thread);
  void run_job(int64_t num_chunks, Thunk thunk, const void* fn);
  void work(int thread);
  // Claims and runs chunks of job `generation`; false once none is left.
  void drain(uint32_t generation, int thread);

  std::vector<std::thread> workers_;
  // (generation << 32) | next chunk: claiming checks the generation, so a worker that woke for
  // an earlier job never takes a chunk of a later one.
  std::atomic<uint64_t> ticket_{0};
  std::atomic<uint32_t> generation_{0};
  std::atomic<int64_t> done_{0};
  std::atomic<bool> stop_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;  // the job's first exception
  // Written after the ticket moves on: a worker that reads a later job's values through a stale
  // ticket fails its claim (see drain).
  std::atomic<Thunk> thunk_{nullptr};
  std::atomic<const void*> fn_{nullptr};
  std::atomic<int64_t> num_chunks_{0};
};

// Processors this process may run on (its affinity mask), at least 1.
int available_processors();

}  // namespace optimate::cpu
