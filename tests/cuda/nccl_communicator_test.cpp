// The NCCL communicator on every visible GPU (one rank a GPU; a one-GPU machine runs one rank
// through the same path): the collectives give what the in-process communicator gives.
#include <gtest/gtest.h>

#if OPTIMATE_HAVE_NCCL
#include <functional>
#include <thread>

#include <cuda_runtime.h>

#include "backend/cuda/nccl_communicator.h"
#include "core/error.h"

namespace optimate::cuda {
namespace {

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

std::vector<std::string> run_ranks(std::vector<std::unique_ptr<DeviceCommunicator>>& comms,
                                   const std::function<void(parallel::Communicator&)>& body) {
  std::vector<std::string> errors(comms.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        cudaSetDevice(static_cast<int>(r));
        parallel::run_collectively(*comms[r], [&] { body(*comms[r]); });
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

TEST(NcclCommunicator, CollectivesOnEveryVisibleGpu) {
  const int n = device_count();
  if (n == 0) GTEST_SKIP() << "no GPU";
  std::vector<int> devices(n);
  for (int i = 0; i < n; ++i) devices[i] = i;
  auto comms = make_nccl_communicators(devices);
  const size_t len = 1001;
  std::vector<std::vector<float>> sums(n), gathered(n);
  std::vector<std::vector<uint8_t>> bytes(n);
  auto errors = run_ranks(comms, [&](parallel::Communicator& c) {
    std::vector<float> host(len);
    for (size_t i = 0; i < len; ++i) host[i] = static_cast<float>(c.rank() + 1) * 0.5f + static_cast<float>(i);
    float *data = nullptr, *all = nullptr;
    cudaMalloc(&data, len * sizeof(float));
    cudaMalloc(&all, n * len * sizeof(float));
    cudaMemcpy(data, host.data(), len * sizeof(float), cudaMemcpyHostToDevice);
    c.all_gather(std::span<const float>(data, len), std::span<float>(all, n * len));
    c.all_reduce_sum(std::span<float>(data, len));
    sums[c.rank()].resize(len);
    gathered[c.rank()].resize(n * len);
    cudaMemcpy(sums[c.rank()].data(), data, len * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(gathered[c.rank()].data(), all, n * len * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(data);
    cudaFree(all);
    bytes[c.rank()] = std::vector<uint8_t>(c.rank() == 0 ? 300 : 1, static_cast<uint8_t>(c.rank() + 7));
    c.broadcast(bytes[c.rank()], 0);
    c.barrier();
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    for (size_t i = 0; i < len; ++i) {
      // Every addend is a multiple of 0.5 below 2^22: the sum is exact in any order.
      ASSERT_EQ(sums[r][i], 0.5f * static_cast<float>(n * (n + 1) / 2) + static_cast<float>(n * i)) << r << " " << i;
      for (int k = 0; k < n; ++k) ASSERT_EQ(gathered[r][k * len + i], static_cast<float>(k + 1) * 0.5f + i);
    }
    EXPECT_EQ(bytes[r], std::vector<uint8_t>(300, 7));
  }
}

}  // namespace
}  // namespace optimate::cuda
#endif
