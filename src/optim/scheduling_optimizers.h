// Registration of the scheduling optimizers of the seed's section 3.1:
//   priority   - PriorityQueuePolicy (+ PriorityVictimPolicy unless choose_victims = false)
//   predictive - PredictiveBatchPolicy
#pragma once

namespace optimate::optim {

class OptimizerRegistry;

void register_scheduling_optimizers(OptimizerRegistry& registry);

}  // namespace optimate::optim
