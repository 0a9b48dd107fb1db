// Device communicators for ranks that are threads of this process and may share one GPU, over
// the in-process communicator (parallel/in_process_communicator.h) with every collective staged
// through host memory: the stream is waited for, the rank's buffer copied to the host, reduced or
// gathered there in rank order (the same bits on every rank and in every run), and copied back.
// What tests run tensor parallelism with on one GPU; slow, and not capturable into graphs.
#pragma once

#include <memory>
#include <vector>

#include "backend/cuda/device_communicator.h"

namespace optimate::cuda {

// One communicator per rank of a group of num_ranks (>= 1), rank i at index i.
std::vector<std::unique_ptr<DeviceCommunicator>> make_host_staged_communicators(int num_ranks);

}  // namespace optimate::cuda
