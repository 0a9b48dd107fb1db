// The cost model as the engine reads it: the seconds a batch should take on the profiled
// backend, for the throughput guard (engine/throughput_guard.h) of `optimate serve
// --cost-profile`.
#pragma once

#include <vector>

#include "runner/model_runner.h"
#include "bench/cost_model.h"
#include "engine/throughput_guard.h"

namespace optimate::bench {

// Each sequence's share of the batch, as the cost model counts it.
std::vector<SeqWork> batch_work(const ForwardBatch& batch);

StepEstimator cost_model_estimator(const CostProfile& profile);

}  // namespace optimate::bench
