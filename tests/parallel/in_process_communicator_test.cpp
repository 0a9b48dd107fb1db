#include "parallel/in_process_communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "core/error.h"

namespace optimate::parallel {
namespace {

// Runs body(comm) on one thread per rank and returns each rank's error message ("" when none).
std::vector<std::string> run_ranks(int n, const std::function<void(Communicator&)>& body) {
  auto comms = make_in_process_communicators(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        run_collectively(*comms[r], [&] { body(*comms[r]); });
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

float value(int rank, size_t i) { return 0.1f * static_cast<float>(rank + 1) + 1e-3f * static_cast<float>(i) - 0.37f; }

class CommunicatorTest : public ::testing::TestWithParam<int> {};

TEST_P(CommunicatorTest, AllReduceSumsInRankOrderForSizesNotDivisibleByRanks) {
  const int n = GetParam();
  for (size_t len : {size_t{0}, size_t{1}, size_t{3}, size_t{7}, size_t{1001}}) {
    std::vector<std::vector<float>> results(n);
    auto errors = run_ranks(n, [&](Communicator& c) {
      std::vector<float> data(len);
      for (size_t i = 0; i < len; ++i) data[i] = value(c.rank(), i);
      c.all_reduce_sum(data);
      results[c.rank()] = data;
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(errors[r], "") << "rank " << r;
      ASSERT_EQ(results[r].size(), len);
      for (size_t i = 0; i < len; ++i) {
        float expect = value(0, i);  // the same order of additions, so the same bits
        for (int k = 1; k < n; ++k) expect += value(k, i);
        ASSERT_EQ(results[r][i], expect) << "rank " << r << " element " << i << " of " << len;
      }
    }
  }
}

TEST_P(CommunicatorTest, AllGatherConcatenatesInRankOrder) {
  const int n = GetParam();
  std::vector<std::vector<float>> results(n);
  auto errors = run_ranks(n, [&](Communicator& c) {
    std::vector<float> send = {static_cast<float>(c.rank()), 10.0f + c.rank(), 20.0f + c.rank()};
    std::vector<float> recv(3 * n, -1.0f);
    c.all_gather(send, recv);
    results[c.rank()] = recv;
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(errors[r], "");
    for (int k = 0; k < n; ++k) {
      EXPECT_EQ(results[r][3 * k], k);
      EXPECT_EQ(results[r][3 * k + 2], 20.0f + k);
    }
  }
}

TEST_P(CommunicatorTest, BroadcastGivesEveryRankTheRootsBytes) {
  const int n = GetParam();
  const int root = n - 1;
  std::vector<std::vector<uint8_t>> results(n);
  auto errors = run_ranks(n, [&](Communicator& c) {
    std::vector<uint8_t> bytes(c.rank() == root ? 5 : 2, static_cast<uint8_t>(c.rank()));
    c.broadcast(bytes, root);
    c.barrier();
    results[c.rank()] = bytes;
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(errors[r], "");
    EXPECT_EQ(results[r], std::vector<uint8_t>(5, static_cast<uint8_t>(root)));
  }
}

// A rank that throws while its peers wait in a collective: every rank gets an error naming it,
// none hangs, and the group works again afterwards.
TEST_P(CommunicatorTest, AFailingRankFailsEveryRankAndTheGroupRecovers) {
  const int n = GetParam();
  const int bad = n / 2;
  auto comms = make_in_process_communicators(n);
  std::vector<std::string> errors(n);
  std::vector<std::vector<float>> after(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      Communicator& c = *comms[r];
      try {
        run_collectively(c, [&] {
          std::vector<float> data(10, 1.0f);
          c.all_reduce_sum(data);  // succeeds
          if (r == bad) throw Error(ErrorCode::kResourceExhausted, "out of scratch memory");
          c.all_reduce_sum(data);  // the others wait here for the rank that left
        });
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
      std::vector<float> data(4, 1.0f);
      run_collectively(c, [&] { c.all_reduce_sum(data); });
      after[r] = data;
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(errors[r].find("out of scratch memory"), std::string::npos) << "rank " << r << ": " << errors[r];
    if (r != bad) EXPECT_NE(errors[r].find("rank " + std::to_string(bad) + " failed"), std::string::npos) << errors[r];
    EXPECT_EQ(after[r], std::vector<float>(4, static_cast<float>(n)));
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, CommunicatorTest, ::testing::Values(1, 2, 4));

TEST(InProcessCommunicator, MismatchedLengthsAreAnErrorOnEveryRank) {
  for (int n : {2, 4}) {
    auto errors = run_ranks(n, [&](Communicator& c) {
      std::vector<float> data(c.rank() == 0 ? 3 : 4, 1.0f);
      c.all_reduce_sum(data);
    });
    for (int r = 0; r < n; ++r) EXPECT_NE(errors[r].find("all_reduce_sum"), std::string::npos) << errors[r];
  }
}

TEST(InProcessCommunicator, RefusesAnEmptyGroupAndABadRoot) {
  EXPECT_THROW(make_in_process_communicators(0), Error);
  auto comms = make_in_process_communicators(1);
  std::vector<uint8_t> bytes;
  EXPECT_THROW(comms[0]->broadcast(bytes, 1), Error);
}

}  // namespace
}  // namespace optimate::parallel
