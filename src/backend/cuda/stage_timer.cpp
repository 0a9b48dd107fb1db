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
  if (!enabled_) return;
  OPTIMATE_CUDA_CHECK(cudaEventRecord(event(stages_.size()), stream));
  stages_.push_back(stage);
}

void StageTimer::end_step(cudaStream_t stream) {
  if (!enabled_ || stages_.empty()) return;
  const size_t n = stages_.size();
  OPTIMATE_CUDA_CHECK(cudaEventRecord(event(n), stream));
  OPTIMATE_CUDA_CHECK(cudaEventSynchronize(pool_[n]));
  for (size_t i = 0; i < n; ++i) {
    float ms = 0.0f;
    OPTIMATE_CUDA_CHECK(cudaEventElapsedTime(&ms, pool_[i], pool_[i + 1]));
    totals_.ms[static_cast<int>(stages_[i])] += ms;
  }
  ++totals_.steps;
  stages_.clear();
}

StageTimer::Totals StageTimer::take() {
  Totals t = totals_;
  totals_ = {};
  return t;
}

}  // namespace optimate::cuda
