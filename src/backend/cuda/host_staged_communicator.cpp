#include "backend/cuda/host_staged_communicator.h"

#include <span>

#include "backend/cuda/cuda_check.h"
#include "parallel/in_process_communicator.h"

namespace optimate::cuda {
namespace {

class HostStagedCommunicator final : public DeviceCommunicator {
 public:
  explicit HostStagedCommunicator(std::unique_ptr<parallel::Communicator> host) : host_(std::move(host)) {}

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  void all_reduce_sum(std::span<float> data) override { host_->all_reduce_sum(data); }
  void all_gather(std::span<const float> send, std::span<float> recv) override { host_->all_gather(send, recv); }
  void broadcast(std::vector<uint8_t>& bytes, int root) override { host_->broadcast(bytes, root); }
  void barrier() override { host_->barrier(); }
  void abort(std::string_view reason) override { host_->abort(reason); }
  void recover() override { host_->recover(); }

  void all_reduce_sum_async(float* data, size_t count, cudaStream_t stream) override {
    staging_.resize(count);
    to_host(data, count, stream);
    host_->all_reduce_sum(staging_);
    to_device(data, count, stream);
  }

  void all_gather_async(const float* send, float* recv, size_t count, cudaStream_t stream) override {
    staging_.resize(count);
    gathered_.resize(count * static_cast<size_t>(size()));
    to_host(send, count, stream);
    host_->all_gather(staging_, gathered_);
    OPTIMATE_CUDA_CHECK(cudaMemcpyAsync(recv, gathered_.data(), gathered_.size() * sizeof(float),
                                        cudaMemcpyHostToDevice, stream));
    OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  bool graph_capturable() const override { return false; }
  // The in-process group recovers in place: nothing captured to invalidate.
  uint64_t generation() const override { return 0; }

 private:
  void to_host(const float* data, size_t count, cudaStream_t stream) {
    OPTIMATE_CUDA_CHECK(cudaMemcpyAsync(staging_.data(), data, count * sizeof(float), cudaMemcpyDeviceToHost, stream));
    OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  void to_device(float* data, size_t count, cudaStream_t stream) {
    OPTIMATE_CUDA_CHECK(cudaMemcpyAsync(data, staging_.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream));
    OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  std::unique_ptr<parallel::Communicator> host_;
  std::vector<float> staging_, gathered_;  // pageable: the copies are waited for anyway
};

}  // namespace

std::vector<std::unique_ptr<DeviceCommunicator>> make_host_staged_communicators(int num_ranks) {
  std::vector<std::unique_ptr<DeviceCommunicator>> out;
  for (auto& host : parallel::make_in_process_communicators(num_ranks))
    out.push_back(std::make_unique<HostStagedCommunicator>(std::move(host)));
  return out;
}

}  // namespace optimate::cuda
