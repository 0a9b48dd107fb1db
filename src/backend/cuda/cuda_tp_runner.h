// The CUDA backend split by tensor parallelism (parallel/tp_runner.h): each rank a
// CudaModelRunner over its shard of the weights, its heads' KV cache and its vocabulary rows,
// on a GPU of its own; ranks are threads of this process, rank 0 the caller's.
//
// Communicators (device_communicator.h): NCCL, one rank per GPU, its collectives captured into
// the decode graphs; or host-staged, for ranks that share one GPU (tests and benchmarks on a
// one-GPU machine: NCCL refuses two ranks on one device), whose runners run eagerly.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_model_runner.h"
#include "parallel/tp_runner.h"

namespace optimate::cuda {

enum class TpCommunicatorKind { kNccl, kHostStaged };

struct CudaTpOptions {
  int num_ranks = 1;
  // false: rank r on GPU options.device + r, which must be visible. true: every rank on
  // options.device (only the host-staged communicator allows it; the KV cache's size must be
  // given, num_kv_blocks, since the ranks' memory plans would each claim the whole card).
  bool ranks_share_device = false;
  TpCommunicatorKind communicator = TpCommunicatorKind::kNccl;
};

// The GPU of each rank, in rank order, or Error(kInvalidArgument) saying why the placement
// cannot work: too few visible GPUs for one rank each, ranks sharing a GPU over NCCL, a shared
// GPU without a fixed KV cache size, or a communicator this build lacks. No GPU is touched.
std::vector<int> plan_rank_devices(const CudaTpOptions& tp, const CudaRunnerOptions& options, int num_visible_gpus);

// The model split over tp.num_ranks ranks (Error(kInvalidArgument) from
// parallel::plan_tp_partition when the heads, KV heads or MLP features do not divide). weights:
// the host model, each rank's shard uploaded to its GPU; null: seeded dummy weights made on each
// GPU (dummy_seed), every rank its own, for benchmarks. The decode graphs of every rank are
// captured before this returns. The runner samples on the GPUs (forward_sample).
std::unique_ptr<parallel::TpRunner> make_cuda_tp_runner(const ModelConfig& config, const ModelWeights* weights,
                                                        uint64_t dummy_seed, const CudaRunnerOptions& options,
                                                        const CudaTpOptions& tp);

}  // namespace optimate::cuda
