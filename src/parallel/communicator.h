// The collectives tensor parallelism needs, between the ranks of one model: each rank holds a
// Communicator of its own and every rank makes the same calls in the same order (as with NCCL).
// The in-process implementation (in_process_communicator.h) runs the ranks as threads over host
// memory so the split model is tested on the CPU; a NCCL one serves GPUs behind the same calls.
//
// Failure: a rank that cannot go on calls abort(reason); every rank's pending or next collective
// then throws Error naming that rank and reason, so no rank waits forever on a peer that left.
// After a failure every rank calls recover(), which returns once all have, with the
// communicator usable again (run_collectively does both).
#pragma once

#include <cstdint>
#include <exception>
#include <span>
#include <string_view>
#include <vector>

namespace optimate::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data becomes the element-wise sum of every rank's data (the same length on every rank), the
  // same bits on every rank and in every run (the in-process implementation adds in rank order,
  // rank 0 first; NCCL's order is its algorithm's, fixed for a given group).
  virtual void all_reduce_sum(std::span<float> data) = 0;
  // recv ([size(), send.size()]) becomes every rank's send, in rank order; send has the same
  // length on every rank.
  virtual void all_gather(std::span<const float> send, std::span<float> recv) = 0;
  // Every rank's bytes become root's (resized to its length).
  virtual void broadcast(std::vector<uint8_t>& bytes, int root) = 0;
  // Returns once every rank has called it.
  virtual void barrier() = 0;

  // This rank gives up: see the top of this file. The first reason given is kept.
  virtual void abort(std::string_view reason) = 0;
  // After a failure, on every rank: returns when all ranks have called it.
  virtual void recover() = 0;
};

// Runs fn() on this rank; if it throws, the peers are told (abort), every rank recovers and the
// exception goes on to the caller. Every rank of a step must run its part through it.
template <typename F>
void run_collectively(Communicator& comm, F&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    comm.abort(e.what());
    comm.recover();
    throw;
  } catch (...) {
    comm.abort("an exception that is not a std::exception");
    comm.recover();
    throw;
  }
}

}  // namespace optimate::parallel
