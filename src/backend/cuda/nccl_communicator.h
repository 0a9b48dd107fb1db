// Communicators over NCCL for ranks that are threads of this process, one GPU each
// (parallel/communicator.h; parallel/tp_runner.h runs rank 0 on the engine thread and every
// other rank on a thread of its own). The group comes from ncclCommInitAll with NVLink
// multicast off (NCCL_NVLS_ENABLE=0 is set before it; nothing here creates multicast memory).
//
// Buffers: all_reduce_sum and all_gather take device memory on the rank's GPU and run on the
// communicator's own stream, returning once the collective is done; their _async forms
// (device_communicator.h) are enqueued on the caller's stream and return at once, so a CUDA
// graph captures them. broadcast (the step plan, host bytes) and barrier never touch the GPUs:
// the ranks being threads of one process, they meet through the in-process communicator, a few
// microseconds instead of NCCL round trips and stream waits. abort() aborts every communicator
// of the group (ncclCommAbort), so a rank blocked in a collective returns and throws, and wakes
// the host's waiters; recover() waits for every rank and then creates the group anew (a new
// generation()).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "backend/cuda/device_communicator.h"

namespace optimate::cuda {

// One communicator per device, rank i on devices[i]. Error(kNotFound) naming the devices when
// NCCL cannot create the group.
std::vector<std::unique_ptr<DeviceCommunicator>> make_nccl_communicators(std::span<const int> devices);

}  // namespace optimate::cuda
