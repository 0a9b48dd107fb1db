#include "optim/scheduling_optimizers.h"

#include "optim/kv_quant_policy.h"
#include "optim/predictive_batch_policy.h"
#include "optim/priority_queue_policy.h"
#include "optim/registry.h"

namespace optimate::optim {

void register_scheduling_optimizers(OptimizerRegistry& registry) {
  registry.register_optimizer(
      "priority", "strict priority levels, a starvation bound per level and priority preemption",
      [](OptionReader& reader, const BuildContext& context) {
        const PriorityOptions options = PriorityOptions::read(reader, context.priority_order);
        PolicySet set;
        set.queue = std::make_shared<PriorityQueuePolicy>(options);
        if (options.choose_victims) set.preempt = std::make_shared<PriorityVictimPolicy>(options);
        return set;
      });
  registry.register_optimizer(
      "kv_quant", "store the KV of less important requests quantized while the cache is short of memory",
      [](OptionReader& reader, const BuildContext& context) {
        PolicySet set;
        set.kv = std::make_shared<KvQuantPolicy>(KvQuantOptions::read(reader, context.priority_order));
        return set;
      });
  registry.register_optimizer(
      "predictive", "hold new requests up to max_wait_ms when a fuller batch is worth the wait",
      [](OptionReader& reader) {
        PolicySet set;
        set.batch = std::make_shared<PredictiveBatchPolicy>(PredictiveOptions::read(reader));
        return set;
      });
}

}  // namespace optimate::optim
