// Where a step's GPU time goes: with timing on, an event is recorded before each stage of the
// launch sequence (embedding, norms, each projection, attention, lm_head, sampling, a tensor-
// parallel rank's all-reduces and logits gather), and after
// the step the intervals are added up per stage. Eager steps only (a graph replay is one
// launch); the events cost a few microseconds each, so timed steps are not the fastest ones.
#pragma once

#include <array>
#include <cstdint>
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

  bool enabled() const { return enabled_; }
  void set_enabled(bool enabled) { enabled_ = enabled; }
  // Starts the interval of `stage` (ending the previous one) on `stream`; nothing when off.
  void mark(Stage stage, cudaStream_t stream);
  // After the stream is synchronized: adds the step's intervals to the totals.
  void end_step(cudaStream_t stream);

  struct Totals {
    std::array<double, static_cast<int>(Stage::kCount)> ms{};
    int64_t steps = 0;
  };
  // The totals so far, and zeroes them.
  Totals take();

 private:
  cudaEvent_t event(size_t i);

  bool enabled_ = false;
  std::vector<cudaEvent_t> pool_;
  std::vector<Stage> stages_;  // stage of the interval starting at pool_[i]
  Totals totals_;
};

}  // namespace optimate::cuda
