#include "engine/engine_stats.h"

#include "engine/engine.h"
#include "kv/kv_precision.h"

namespace optimate {

EngineStats engine_stats(const Engine& engine) {
  const sched::Scheduler& s = engine.scheduler();
  const kv::BlockPool& pool = s.kv().pool();
  EngineStats out;
  out.num_running = s.num_running();
  out.num_waiting = s.num_waiting();
  for (sched::SeqId seq : s.waiting_queue())
    if (const sched::Request* r = s.find(seq))
      ++out.num_waiting_by_priority[to_client_priority(engine.config().priority_order, r->priority)];
  out.kv_total_blocks = pool.num_blocks();
  out.kv_used_blocks = pool.num_blocks() - pool.num_free_blocks();
  for (int32_t id = 0; id < pool.num_blocks(); ++id)
    if (!pool.is_free(id)) ++out.kv_blocks_by_precision[kv::kv_precision_name(pool.precision(id))];
  const sched::SchedulerStats& st = s.stats();
  out.num_steps = st.num_steps;
  out.num_preemptions = st.num_preemptions;
  out.num_prompt_tokens = st.num_prompt_tokens_computed;
  out.num_generation_tokens = st.num_generated_tokens;
  out.prefix_cache_queries = pool.counters().prefix_queries_tokens;
  out.prefix_cache_hits = pool.counters().prefix_hits_tokens;
  return out;
}

}  // namespace optimate
