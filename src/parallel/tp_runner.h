// A model split over ranks (tp_partition.h) behind the one ModelRunner the engine already
// drives: the scheduler, KV manager and policies above see one engine. One rank runner per
// rank, each holding its heads, KV cache and vocabulary rows; rank 0 runs on the caller's
// thread, every other rank on a thread of its own, a GPU each once ranks are devices (one
// process, so the engine, its scheduler and its KV books stay as they are and no step crosses a
// process boundary).
//
// A call (forward, requantize, copy_kv) is one step plan broadcast from rank 0 to the ranks
// (rank_command.h), every rank's part, and a barrier; rank 0's result (its all-gathered logits)
// is the one result back. The rank runners meet inside forward through their communicators (the
// all-reduces after the o and down projections, the embedding, the logits). A rank that throws
// aborts the group: every rank's call ends, the group recovers, and the caller gets rank 0's
// error (or the failed rank's, by name), so a failed step loses no thread and the next one runs.
#pragma once

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "runner/model_runner.h"
#include "parallel/communicator.h"

namespace optimate::parallel {

class TpRunner final : public ModelRunner {
 public:
  // Builds rank r's runner over comms[r]; called for every rank, in order, on the caller's thread.
  using RankFactory = std::function<std::unique_ptr<ModelRunner>(int rank, Communicator& comm)>;

  // `config`: the whole model's (what the engine sees). comms: one per rank, rank order.
  TpRunner(const ModelConfig& config, std::vector<std::unique_ptr<Communicator>> comms,
           const RankFactory& make_rank);
  ~TpRunner() override;
  TpRunner(const TpRunner&) = delete;
  TpRunner& operator=(const TpRunner&) = delete;

  const ModelConfig& config() const override { return config_; }
  // Rank 0's cache as one: every rank has the same blocks and slots, each holding its own heads,
  // so a slot's bytes (and the heads) are the ranks' together.
  const KvCacheShape& kv_shape() const override { return kv_shape_; }
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;
  // Rank 0 draws the tokens on its device from the gathered logits (every rank holds the same
  // rows, so any would draw the same); the others run the step and draw nothing that is used.
  // False, having run nothing, unless set_device_sampling(true) and rank 0's runner samples.
  bool forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows,
                      std::vector<int32_t>& token_ids) override;
  // For rank runners that sample on the device (the CUDA backend's); off by default, so a step
  // of runners that cannot is never broadcast twice.
  void set_device_sampling(bool enabled) { device_sampling_ = enabled; }
  void requantize(std::span<const RequantizeOp> ops) override;
  void copy_kv(std::span<const kv::KvCopy> copies) override;
  // Every rank copies its heads' bytes at once: the slowest rank's rate times the ranks.
  double host_link_bytes_per_s() const override;
  StepCapacity capacity() const override;
  int64_t weight_bytes() const override;

  int num_ranks() const { return static_cast<int>(ranks_.size()); }
  const ModelRunner& rank(int r) const { return *ranks_.at(r); }
  // For settings a backend's runner offers beyond ModelRunner (benchmarks' stage timing), between
  // calls only.
  ModelRunner& rank(int r) { return *ranks_.at(r); }

 private:
  // Broadcasts `message`, runs rank 0's part, meets the others at the barrier.
  void drive(std::vector<uint8_t> message, const std::function<void()>& own_part);
  void serve(int rank);  // the loop of a rank's thread
  void stop();

  ModelConfig config_;
  KvCacheShape kv_shape_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::unique_ptr<ModelRunner>> ranks_;
  std::vector<std::thread> threads_;  // ranks 1..N-1
  bool device_sampling_ = false;
};

}  // namespace optimate::parallel
