#include "bench/step_estimator.h"

#include <memory>

namespace optimate::bench {

std::vector<SeqWork> batch_work(const ForwardBatch& batch) {
  std::vector<SeqWork> work;
  work.reserve(batch.seqs.size());
  for (const SeqSlice& s : batch.seqs) work.push_back({static_cast<int64_t>(s.token_ids.size()), s.start_pos});
  return work;
}

StepEstimator cost_model_estimator(const CostProfile& profile) {
  auto model = std::make_shared<const CostModel>(profile);
  return [model](const ForwardBatch& batch) { return model->step_cost(batch_work(batch)).seconds; };
}

}  // namespace optimate::bench
