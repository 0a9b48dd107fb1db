#include "backend/cpu/cpu_tp_runner.h"

#include <algorithm>

#include <omp.h>

#include "parallel/in_process_communicator.h"
#include "parallel/weight_shard.h"

namespace optimate::cpu {

std::unique_ptr<parallel::TpRunner> make_cpu_tp_runner(const ModelConfig& config, const ModelWeights& weights,
                                                       const CpuRunnerOptions& options, int num_ranks) {
  const parallel::TpPartition partition = parallel::plan_tp_partition(config, num_ranks);
  const ModelConfig rank_config = parallel::rank_model_config(config, partition);
  CpuRunnerOptions rank_options = options;
  const int threads = options.num_threads > 0 ? options.num_threads : omp_get_max_threads();
  rank_options.num_threads = std::max(1, threads / num_ranks);
  return std::make_unique<parallel::TpRunner>(
      config, parallel::make_in_process_communicators(num_ranks),
      [&](int rank, parallel::Communicator& comm) -> std::unique_ptr<ModelRunner> {
        const ModelWeights shard = parallel::shard_weights(config, weights, partition, rank);
        return std::make_unique<CpuModelRunner>(rank_config, shard, rank_options,
                                                CpuTpRank{.comm = &comm, .partition = partition});
      });
}

}  // namespace optimate::cpu
