// Communicators for ranks that are threads of one process, over host memory: what CI runs
// tensor parallelism with, and the reference a device communicator's results are compared to.
//
// Every collective publishes each rank's buffer, meets at a barrier, and reads the peers'
// buffers directly: an all-reduce has each rank sum one chunk of the elements in rank order
// (a reduce-scatter), then every rank copies all chunks (an all-gather), so the sums are the
// same bits on every rank and from run to run. The barriers wait on a condition variable: no
// timeouts, no polling.
#pragma once

#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace optimate::parallel {

// One communicator per rank of a group of `num_ranks` (>= 1), rank i at index i. Each is used by
// one thread at a time; the group lives as long as any of them.
std::vector<std::unique_ptr<Communicator>> make_in_process_communicators(int num_ranks);

}  // namespace optimate::parallel
