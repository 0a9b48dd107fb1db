#include "optim/scheduling_optimizers.h"

#include "optim/predictive_batch_policy.h"
#include "optim/priority_queue_policy.h"
#include "optim/registry.h"

namespace optimate::optim {

void register_scheduling_optimizers(OptimizerRegistry& registry) {
  registry.register_optimizer(
      "priority", "priority levels with aging, a max-wait bound per level and priority preemption",
      [](OptionReader& reader) {
        const PriorityOptions options = PriorityOptions::read(reader);
        PolicySet set;
        set.queue = std::make_shared<PriorityQueuePolicy>(options);
        if (options.choose_victims) set.preempt = std::make_shared<PriorityVictimPolicy>(options);
        return set;
      });
  registry.register_optimizer(
      "predictive", "hold new requests up to max_wait_ms when a fuller batch is worth the wait",
      [](OptionReader& reader) {
        const PredictiveOptions options = PredictiveOptions::read(reader);
        PolicySet set;
        set.batch = std::make_shared<PredictiveBatchPolicy>(options);
        return set;
      });
}

}  // namespace optimate::optim
