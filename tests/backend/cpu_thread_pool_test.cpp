// The CPU backend's thread pool: every chunk runs exactly once per job, thread numbers index
// per-thread scratch safely, and jobs follow one another without leaking chunks between them.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "backend/cpu/cpu_thread_pool.h"

namespace optimate::cpu {
namespace {

TEST(CpuThreadPool, RunsEveryChunkOnceAcrossManyJobs) {
  for (int threads : {1, 2, 3}) {
    CpuThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 7, 64, 1000}) {
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::vector<std::atomic<int>> busy(static_cast<size_t>(threads));
        std::atomic<bool> shared_thread{false};
        pool.run(n, [&](int64_t c, int t) {
          ASSERT_GE(t, 0);
          ASSERT_LT(t, threads);
          if (busy[t].fetch_add(1) != 0) shared_thread = true;
          hits[c].fetch_add(1);
          busy[t].fetch_sub(1);
        });
        EXPECT_FALSE(shared_thread) << "two chunks ran at once under one thread number";
        for (int64_t c = 0; c < n; ++c) ASSERT_EQ(hits[c].load(), 1) << "chunk " << c << " of " << n << ", threads " << threads;
      }
    }
  }
}

TEST(CpuThreadPool, RethrowsAChunksErrorAfterTheJobAndStaysUsable) {
  CpuThreadPool pool(2);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.run(50, [&](int64_t c, int) {
    ran.fetch_add(1);
    if (c == 7) throw std::runtime_error("chunk 7");
  }), std::runtime_error);
  EXPECT_EQ(ran.load(), 50);
  std::atomic<int> again{0};
  pool.run(10, [&](int64_t, int) { again.fetch_add(1); });
  EXPECT_EQ(again.load(), 10);
}

TEST(CpuThreadPool, UsesAllProcessorsByDefault) {
  CpuThreadPool pool;
  EXPECT_EQ(pool.num_threads(), available_processors());
  EXPECT_GE(available_processors(), 1);
}

}  // namespace
}  // namespace optimate::cpu
