#include "backend/cuda/stage_timer.h"

#include "backend/cuda/cuda_check.h"

namespace optimate::cuda {

const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::kCopyIn: return "copy_in";
    case Stage::kEmbedding: return "embedding";
    case Stage::kElementwise: return "norm_rope_kv_act";
    case Stage::kQkv: return "qkv_proj";
    case Stage::kAttention: return "attention";
    case Stage::kOProj: return "o_proj";
    case Stage::kGateUp: return "gate_up_proj";
    case Stage::kDown: return "down_proj";
    case Stage::kFinalNorm: return "final_norm";
    case Stage::kLmHead: return "lm_head";
    case Stage::kArgmax: return "argmax";
    case Stage::kSampling: return "sampling";
    case Stage::kCopyOut: return "copy_out";
    case Stage::kCollective: return "collectives";
    case Stage::kCount: break;
  }
  return "?";
}

StageTimer::~StageTimer() {
  for (cudaEvent_t e : pool_) cudaEventDestroy(e);
  for (auto& slot : span_)
    for (cudaEvent_t e : slot)
      if (e) cudaEventDestroy(e);
}

void StageTimer::arm_step() {
  one_step_ = one_step_requested_ && !enabled_;
  one_step_requested_ = false;
  stages_.clear();
}

void StageTimer::begin_step(cudaStream_t stream) {
  span_slot_ ^= 1;
  cudaEvent_t* span = span_[span_slot_];
  if (!span[0])
    for (int i = 0; i < 2; ++i) OPTIMATE_CUDA_CHECK(cudaEventCreate(&span[i]));
  span_recorded_[span_slot_] = false;
  OPTIMATE_CUDA_CHECK(cudaEventRecord(span[0], stream));
}

bool StageTimer::last_step(double& busy_s, std::vector<std::pair<std::string, double>>& stages) const {
  if (!span_recorded_[last_span_]) return false;
  float ms = 0.0f;
  OPTIMATE_CUDA_CHECK(cudaEventElapsedTime(&ms, span_[last_span_][0], span_[last_span_][1]));
  busy_s = 1e-3 * ms;
  stages = last_stages_;
  return true;
}

cudaEvent_t StageTimer::event(size_t i) {
  while (pool_.size() <= i) {
    cudaEvent_t e = nullptr;
    OPTIMATE_CUDA_CHECK(cudaEventCreate(&e));
    pool_.push_back(e);
  }
  return pool_[i];
}

void StageTimer::mark(Stage stage, cudaStream_t stream) {
  if (!enabled()) return;
  OPTIMATE_CUDA_CHECK(cudaEventRecord(event(stages_.size()), stream));
  stages_.push_back(stage);
}

void StageTimer::end_step(cudaStream_t stream) {
  if (span_[span_slot_][1]) {
    OPTIMATE_CUDA_CHECK(cudaEventRecord(span_[span_slot_][1], stream));
    span_recorded_[span_slot_] = true;
    last_span_ = span_slot_;
  }
  last_stages_.clear();
  const bool one_step = one_step_;
  one_step_ = false;
  if (!(enabled_ || one_step) || stages_.empty()) return;
  const size_t n = stages_.size();
  OPTIMATE_CUDA_CHECK(cudaEventRecord(event(n), stream));
  OPTIMATE_CUDA_CHECK(cudaEventSynchronize(pool_[n]));
  Totals step;
  for (size_t i = 0; i < n; ++i) {
    float ms = 0.0f;
    OPTIMATE_CUDA_CHECK(cudaEventElapsedTime(&ms, pool_[i], pool_[i + 1]));
    step.ms[static_cast<int>(stages_[i])] += ms;
  }
  stages_.clear();
  if (one_step) {
    for (int i = 0; i < static_cast<int>(Stage::kCount); ++i)
      if (step.ms[i] > 0.0) last_stages_.emplace_back(stage_name(static_cast<Stage>(i)), 1e-3 * step.ms[i]);
    return;
  }
  for (int i = 0; i < static_cast<int>(Stage::kCount); ++i) totals_.ms[i] += step.ms[i];
  ++totals_.steps;
}

StageTimer::Totals StageTimer::take() {
  Totals t = totals_;
  totals_ = {};
  return t;
}

}  // namespace optimate::cuda
