#include "backend/cuda/cuda_tp_runner.h"

#include <exception>
#include <functional>
#include <string>
#include <thread>

#include <fmt/ranges.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_communicator.h"
#include "backend/cuda/host_staged_communicator.h"
#include "core/error.h"
#include "core/logging.h"
#include "parallel/weight_shard.h"
#if OPTIMATE_HAVE_NCCL
#include "backend/cuda/nccl_communicator.h"
#endif

namespace optimate::cuda {
namespace {

std::vector<std::unique_ptr<DeviceCommunicator>> make_communicators(const CudaTpOptions& tp,
                                                                    const std::vector<int>& devices) {
  if (tp.communicator == TpCommunicatorKind::kHostStaged) return make_host_staged_communicators(tp.num_ranks);
#if OPTIMATE_HAVE_NCCL
  return make_nccl_communicators(devices);
#else
  (void)devices;
  fail(ErrorCode::kUnsupported, "tensor parallelism over GPUs needs NCCL, which this build lacks");
#endif
}

// Runs body(r) for every rank on a thread of its own, the rank's GPU current; rethrows the first
// error by rank. body runs through run_collectively, so a rank that fails releases the others'
// pending collectives.
void on_every_rank(const std::vector<int>& devices, std::vector<std::unique_ptr<DeviceCommunicator>>& comms,
                   const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(devices.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < static_cast<int>(devices.size()); ++r)
    threads.emplace_back([&, r] {
      try {
        parallel::run_collectively(*comms[r], [&] {
          OPTIMATE_CUDA_CHECK(cudaSetDevice(devices[r]));
          body(r);
        });
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

std::vector<int> plan_rank_devices(const CudaTpOptions& tp, const CudaRunnerOptions& options, int num_visible_gpus) {
  const int n = tp.num_ranks;
  if (n < 1) fail(ErrorCode::kInvalidArgument, "tensor-parallel-size must be at least 1, got {}", n);
  if (options.device < 0 || options.device >= num_visible_gpus)
    fail(ErrorCode::kInvalidArgument, "GPU {} is not visible ({} GPUs visible)", options.device, num_visible_gpus);
  if (tp.ranks_share_device) {
    if (n > 1 && tp.communicator == TpCommunicatorKind::kNccl)
      fail(ErrorCode::kInvalidArgument, "{} ranks on one GPU: NCCL places one rank per GPU; ranks sharing a GPU "
           "need the host-staged communicator", n);
    if (n > 1 && options.num_kv_blocks <= 0)
      fail(ErrorCode::kInvalidArgument, "{} ranks on one GPU need the KV cache's size given (num_kv_blocks): each "
           "rank's memory plan would otherwise claim the whole card", n);
    return std::vector<int>(static_cast<size_t>(n), options.device);
  }
  if (options.device + n > num_visible_gpus)
    fail(ErrorCode::kInvalidArgument, "tensor-parallel-size {} needs {} GPUs (one a rank, from GPU {}), {} visible{}",
         n, n, options.device, num_visible_gpus,
         num_visible_gpus - options.device > 0
             ? "; sizes that fit: up to " + std::to_string(num_visible_gpus - options.device)
             : std::string());
  std::vector<int> devices(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) devices[r] = options.device + r;
  return devices;
}

std::unique_ptr<parallel::TpRunner> make_cuda_tp_runner(const ModelConfig& config, const ModelWeights* weights,
                                                        uint64_t dummy_seed, const CudaRunnerOptions& options,
                                                        const CudaTpOptions& tp) {
  const parallel::TpPartition partition = parallel::plan_tp_partition(config, tp.num_ranks);
  const std::vector<int> devices = plan_rank_devices(tp, options, cuda_device_count());
  for (int d : devices) {  // what every rank's GPU lacks, before any weights are loaded
    CudaRunnerOptions o = options;
    o.device = d;
    check_runner_gpu(o);
  }
  int caller_device = 0;  // NCCL's set-up switches GPUs; the caller's thread keeps its own
  OPTIMATE_CUDA_CHECK(cudaGetDevice(&caller_device));
  std::vector<std::unique_ptr<DeviceCommunicator>> comms = make_communicators(tp, devices);
  OPTIMATE_CUDA_CHECK(cudaSetDevice(caller_device));
  const ModelConfig rank_config = parallel::rank_model_config(config, partition);

  // Every rank is built and captures its graphs at once, on a thread of its own: the capture's
  // warm-up steps meet the other ranks in collectives, and the weights upload in parallel.
  std::vector<std::unique_ptr<CudaModelRunner>> built(devices.size());
  on_every_rank(devices, comms, [&](int r) {
    ModelConfig weights_config = rank_config;
    weights_config.vocab_size = partition.vocab_end(r) - partition.vocab_begin(r);
    CudaWeights w;
    if (weights) {
      LoadedModel shard;
      shard.config = weights_config;
      shard.path = "rank " + std::to_string(r) + " of " + std::to_string(tp.num_ranks);
      shard.weights = parallel::shard_weights(config, *weights, partition, r);
      w = upload_weights(shard);
    } else {
      w = make_dummy_weights(weights_config, dummy_seed);
    }
    CudaRunnerOptions o = options;
    o.device = devices[r];
    built[r] = std::make_unique<CudaModelRunner>(std::move(w), o, CudaTpRank{comms[r].get(), partition});
    comms[r]->barrier();  // every rank exists before any capture's collectives
    built[r]->capture_decode_graphs();
    comms[r]->barrier();  // a rank that failed to capture fails every rank here
  });
  spdlog::info("CUDA tensor parallel over {} ranks on GPUs [{}], {} communicator: per rank {}", tp.num_ranks,
               fmt::join(devices, ", "), tp.communicator == TpCommunicatorKind::kNccl ? "NCCL" : "host-staged",
               built[0]->memory_plan().describe());

  std::vector<std::unique_ptr<parallel::Communicator>> group;
  for (auto& c : comms) group.push_back(std::move(c));
  auto runner = std::make_unique<parallel::TpRunner>(
      config, std::move(group),
      [&](int rank, parallel::Communicator&) -> std::unique_ptr<ModelRunner> { return std::move(built[rank]); });
  runner->set_device_sampling(true);
  return runner;
}

}  // namespace optimate::cuda
