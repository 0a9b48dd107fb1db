#include "backend/cuda/nccl_communicator.h"

#include <atomic>
#include <cstdlib>

#include <cuda_runtime.h>
#include <nccl.h>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "parallel/group_failure.h"
#include "parallel/in_process_communicator.h"

namespace optimate::cuda {
namespace {

void check_nccl(ncclResult_t status, const char* what) {
  if (status != ncclSuccess) fail(ErrorCode::kInternal, "{}: {}", what, ncclGetErrorString(status));
}

// What the ranks share: the NCCL communicators, and the host state of abort and recover.
struct NcclGroup {
  explicit NcclGroup(std::vector<int> devs)
      : devices(std::move(devs)), comms(devices.size()), failure(static_cast<int>(devices.size())) {
    create();
  }
  ~NcclGroup() {
    for (ncclComm_t c : comms)
      if (c) ncclCommDestroy(c);
  }

  void create() {
    // NVLink multicast (NVLS) stays off: the machines' drivers do not lend it.
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    const ncclResult_t status = ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data());
    if (status != ncclSuccess)
      fail(ErrorCode::kNotFound, "NCCL could not create a group of {} GPUs: {}", devices.size(), ncclGetErrorString(status));
    ++generation;
  }

  std::vector<int> devices;
  std::vector<ncclComm_t> comms;
  parallel::GroupFailure failure;
  std::atomic<uint64_t> generation = 0;  // groups created so far
};

class NcclCommunicator final : public DeviceCommunicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclGroup> group, std::unique_ptr<parallel::Communicator> host, int rank)
      : g_(std::move(group)), host_(std::move(host)), rank_(rank) {
    OPTIMATE_CUDA_CHECK(cudaSetDevice(g_->devices[rank_]));
    OPTIMATE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~NcclCommunicator() override {
    cudaSetDevice(g_->devices[rank_]);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(g_->devices.size()); }

  void all_reduce_sum(std::span<float> data) override {
    run("ncclAllReduce", [&](ncclComm_t c) {
      return ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat, ncclSum, c, stream_);
    });
  }

  void all_gather(std::span<const float> send, std::span<float> recv) override {
    if (recv.size() != send.size() * static_cast<size_t>(size()))
      fail(ErrorCode::kInvalidArgument, "all_gather on rank {}: {} floats to receive, expected {} ranks x {}", rank_,
           recv.size(), size(), send.size());
    run("ncclAllGather", [&](ncclComm_t c) {
      return ncclAllGather(send.data(), recv.data(), send.size(), ncclFloat, c, stream_);
    });
  }

  // The step plan and the barrier stay on the host: the ranks are threads of one process.
  void broadcast(std::vector<uint8_t>& bytes, int root) override { host_->broadcast(bytes, root); }
  void barrier() override { host_->barrier(); }

  void all_reduce_sum_async(float* data, size_t count, cudaStream_t stream) override {
    check_nccl(ncclAllReduce(data, data, count, ncclFloat, ncclSum, live_comm(), stream), "ncclAllReduce");
  }

  void all_gather_async(const float* send, float* recv, size_t count, cudaStream_t stream) override {
    check_nccl(ncclAllGather(send, recv, count, ncclFloat, live_comm(), stream), "ncclAllGather");
  }

  bool graph_capturable() const override { return true; }
  uint64_t generation() const override { return g_->generation.load(); }

  void abort(std::string_view reason) override {
    {
      std::lock_guard lock(g_->failure.mu);
      // Aborting every communicator makes a rank blocked in a collective return.
      g_->failure.abort(rank_, reason, [&] {
        for (ncclComm_t& c : g_->comms) {
          ncclCommAbort(c);
          c = nullptr;
        }
      });
    }
    host_->abort(reason);  // and one waiting at the host's broadcast or barrier
  }

  void recover() override {
    {
      std::unique_lock lock(g_->failure.mu);
      g_->failure.recover(lock, [&] {
        if (g_->comms[0] == nullptr) g_->create();
      });
    }
    host_->recover();
  }

 private:
  // This rank's communicator; an aborted group throws.
  ncclComm_t live_comm() {
    std::lock_guard lock(g_->failure.mu);
    if (g_->failure.aborted()) g_->failure.throw_aborted();
    return g_->comms[rank_];
  }

  // Enqueues one collective on this rank's stream and waits for it; an aborted group throws.
  template <typename Enqueue>
  void run(const char* what, const Enqueue& enqueue) {
    const ncclComm_t comm = live_comm();
    OPTIMATE_CUDA_CHECK(cudaSetDevice(g_->devices[rank_]));
    const ncclResult_t status = enqueue(comm);
    const cudaError_t synced = cudaStreamSynchronize(stream_);
    {
      std::lock_guard lock(g_->failure.mu);
      if (g_->failure.aborted()) g_->failure.throw_aborted();
    }
    check_nccl(status, what);
    OPTIMATE_CUDA_CHECK(synced);
  }

  std::shared_ptr<NcclGroup> g_;
  std::unique_ptr<parallel::Communicator> host_;  // the in-process group's rank: broadcast, barrier
  const int rank_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::vector<std::unique_ptr<DeviceCommunicator>> make_nccl_communicators(std::span<const int> devices) {
  if (devices.empty()) fail(ErrorCode::kInvalidArgument, "a NCCL group needs at least one GPU");
  auto group = std::make_shared<NcclGroup>(std::vector<int>(devices.begin(), devices.end()));
  auto host = parallel::make_in_process_communicators(static_cast<int>(devices.size()));
  std::vector<std::unique_ptr<DeviceCommunicator>> out;
  for (int r = 0; r < static_cast<int>(devices.size()); ++r)
    out.push_back(std::make_unique<NcclCommunicator>(group, std::move(host[r]), r));
  return out;
}

}  // namespace optimate::cuda
