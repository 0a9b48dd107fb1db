// Where a step's GPU time goes: with timing on, an event is recorded before each stage of the
// launch sequence (embedding, norms, each projection, attention, lm_head, sampling, a tensor-
// parallel rank's all-reduces and logits gather), and after
// the step the intervals are added up per stage. Eager steps only (a graph replay is one
// launch); the events cost a few microseconds each, so timed steps are not the fastest ones.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

namespace optimate::cuda {

enum class Stage : int {
  kCopyIn, kEmbedding, kElementwise, kQkv, kAttention, kOProj, kGateUp, kDown, kFinalNorm, kLmHead,
  kArgmax, kSampling, kCopyOut, kCollective, kCount
};

const char* stage_name(Stage stage);

class StageTimer {
 public:
  StageTimer() = default;
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;
  ~StageTimer();

  bool enabled() const { return enabled_ || one_step_; }
  void set_enabled(bool enabled) { enabled_ = enabled; }
  // Times the next step by stage even when off; its stages go to last_step(), not the totals.
  void request_one_step() { one_step_requested_ = true; }
  // At the start of every step, before it decides how to launch (a step timed by stage runs
  // eagerly): takes a request_one_step().
  void arm_step();
  // Just before the step's first operation on the device (its input copies): records the
  // step's first event; its busy time is measured whether timing is on or not.
  void begin_step(cudaStream_t stream);
  // Starts the interval of `stage` (ending the previous one) on `stream`; nothing when off.
  void mark(Stage stage, cudaStream_t stream);
  // After the step's last operation is enqueued: records its last event, and when timing is on
  // waits for it and adds the step's intervals to the totals (or keeps them for last_step()).
  void end_step(cudaStream_t stream);
  // After the stream is synchronized: the last step's busy time, from its first event to its
  // last, and its seconds per stage when it was timed with request_one_step(). False before any step.
  bool last_step(double& busy_s, std::vector<std::pair<std::string, double>>& stages) const;
  // Steps launched without waiting: the span of the step begun last (two alternate, so a step
  // may begin while the one before is uncollected); after collecting a step, make its span the
  // one last_step() reads.
  int current_span() const { return span_slot_; }
  void set_last_span(int slot) { last_span_ = slot; }

  struct Totals {
    std::array<double, static_cast<int>(Stage::kCount)> ms{};
    int64_t steps = 0;
  };
  // The totals so far, and zeroes them.
  Totals take();

 private:
  cudaEvent_t event(size_t i);

  bool enabled_ = false;
  bool one_step_requested_ = false;
  bool one_step_ = false;  // this step is timed for last_step()
  cudaEvent_t span_[2][2] = {};  // per slot: a step's first and last events
  bool span_recorded_[2] = {false, false};
  int span_slot_ = 0;  // the slot of the step begun last
  int last_span_ = 0;  // the slot last_step() reads
  std::vector<std::pair<std::string, double>> last_stages_;
  std::vector<cudaEvent_t> pool_;
  std::vector<Stage> stages_;  // stage of the interval starting at pool_[i]
  Totals totals_;
};

}  // namespace optimate::cuda
