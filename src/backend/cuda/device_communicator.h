// The collectives a CUDA rank runner enqueues inside its forward pass (backend/cuda/
// cuda_tp_runner.h): a Communicator (parallel/communicator.h: the step plan's broadcast, the
// barrier, abort and recover) whose all-reduce and all-gather also take device memory on the
// rank's GPU and are enqueued on the rank's stream without waiting on the host.
//
// Two implementations:
//   NCCL (nccl_communicator.h)       one rank per GPU; the collectives are stream operations,
//                                    so a decode step's CUDA graph captures them.
//   host-staged (host_staged_communicator.h)  ranks that may share one GPU (NCCL refuses two
//                                    ranks on a device): each collective waits for the stream,
//                                    goes through host memory and the in-process communicator
//                                    and back; not capturable, so its runners run eagerly.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "parallel/communicator.h"

namespace optimate::cuda {

class DeviceCommunicator : public parallel::Communicator {
 public:
  // data [count] (device memory) becomes the element-wise sum over the ranks, once `stream`
  // reaches this point; the same bits on every rank.
  virtual void all_reduce_sum_async(float* data, size_t count, cudaStream_t stream) = 0;
  // recv [size(), count] (device memory) becomes every rank's send [count], in rank order.
  virtual void all_gather_async(const float* send, float* recv, size_t count, cudaStream_t stream) = 0;
  // Whether the two calls above may be captured into a CUDA graph.
  virtual bool graph_capturable() const = 0;
  // Changes whenever the group is created anew (recover() after an abort): a graph captured
  // with the old group's collectives must not be replayed.
  virtual uint64_t generation() const = 0;
};

}  // namespace optimate::cuda
