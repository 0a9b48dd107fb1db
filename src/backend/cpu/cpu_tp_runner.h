// The CPU backend split by tensor parallelism over ranks that are threads of this process
// (parallel/tp_runner.h, parallel/in_process_communicator.h): each rank a CpuModelRunner over
// its shard of the weights and its heads of the KV cache. It computes what one CpuModelRunner
// does, up to the order of the sums the all-reduces split: the reference CI checks the split
// against, and the shape a GPU rank of the same split takes.
#pragma once

#include <memory>

#include "backend/cpu/cpu_model_runner.h"
#include "parallel/tp_runner.h"

namespace optimate::cpu {

// `options` as for one runner; num_threads (0: OpenMP's default) is shared out among the ranks,
// at least one each. Error(kInvalidArgument) when num_ranks does not split the model
// (parallel::plan_tp_partition).
std::unique_ptr<parallel::TpRunner> make_cpu_tp_runner(const ModelConfig& config, const ModelWeights& weights,
                                                       const CpuRunnerOptions& options, int num_ranks);

}  // namespace optimate::cpu
