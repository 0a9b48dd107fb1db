// Where the ranks of a split model go, decided before any GPU is touched: one GPU a rank from the
// runner's device, or every rank on one GPU for tests and benchmarks, with the reason when a
// placement cannot run.
#include <gtest/gtest.h>

#include "backend/cuda/cuda_tp_runner.h"
#include "core/error.h"

namespace optimate::cuda {
namespace {

std::string error_of(const CudaTpOptions& tp, const CudaRunnerOptions& o, int visible) {
  try {
    plan_rank_devices(tp, o, visible);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TpPlacement, OneGpuARankFromTheRunnersDevice) {
  CudaRunnerOptions o;
  EXPECT_EQ(plan_rank_devices({.num_ranks = 4}, o, 8), (std::vector<int>{0, 1, 2, 3}));
  o.device = 2;
  EXPECT_EQ(plan_rank_devices({.num_ranks = 2}, o, 4), (std::vector<int>{2, 3}));
  EXPECT_EQ(plan_rank_devices({.num_ranks = 1}, o, 4), (std::vector<int>{2}));
}

TEST(TpPlacement, TooFewGpusSaysHowManyAreNeededAndWhatFits) {
  CudaRunnerOptions o;
  const std::string e = error_of({.num_ranks = 2}, o, 1);
  EXPECT_NE(e.find("tensor-parallel-size 2 needs 2 GPUs"), std::string::npos) << e;
  EXPECT_NE(e.find("1 visible"), std::string::npos) << e;
  EXPECT_NE(e.find("up to 1"), std::string::npos) << e;
  EXPECT_NE(error_of({.num_ranks = 1}, o, 0).find("not visible"), std::string::npos);
  EXPECT_NE(error_of({.num_ranks = 0}, o, 2).find("at least 1"), std::string::npos);
}

TEST(TpPlacement, SharingOneGpuNeedsTheHostStagedCommunicatorAndAFixedCache) {
  CudaRunnerOptions o;
  o.num_kv_blocks = 64;
  const CudaTpOptions shared{.num_ranks = 3, .ranks_share_device = true, .communicator = TpCommunicatorKind::kHostStaged};
  EXPECT_EQ(plan_rank_devices(shared, o, 1), (std::vector<int>{0, 0, 0}));
  CudaTpOptions nccl = shared;
  nccl.communicator = TpCommunicatorKind::kNccl;
  EXPECT_NE(error_of(nccl, o, 1).find("host-staged"), std::string::npos);
  o.num_kv_blocks = 0;
  EXPECT_NE(error_of(shared, o, 1).find("num_kv_blocks"), std::string::npos);
}

}  // namespace
}  // namespace optimate::cuda
