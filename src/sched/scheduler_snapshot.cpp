#include <algorithm>
#include <functional>
#include <map>

#include "sched/scheduler.h"

namespace optimate::sched {

optim::MetricsView Scheduler::metrics() const {
  optim::MetricsView m;
  m.now_ns = clock_.now_ns();
  m.num_running = num_running();
  m.num_waiting = num_waiting();
  m.kv_usage = kv_.pool().usage();
  m.num_kv_blocks = config_.num_kv_blocks;
  m.num_steps = stats_.num_steps;
  m.num_preemptions = stats_.num_preemptions;
  m.num_generated_tokens = stats_.num_generated_tokens;
  m.num_prompt_tokens = stats_.num_prompt_tokens_computed;
  m.last_step_num_tokens = stats_.last_step_num_tokens;
  // Per priority class, most important first: sequences running and waiting, the KV blocks
  // they hold, and of those the blocks of requests long by the KV quota's measure.
  std::map<EnginePriority, optim::ClassMetrics, std::greater<>> classes;
  for (SeqId seq : running_) {
    const Request& r = *requests_.at(seq);
    optim::ClassMetrics& c = classes[r.metadata.priority];
    ++c.num_running;
    const auto blocks = static_cast<int64_t>(kv_.block_ids(seq).size());
    c.kv_blocks += blocks;
    if (r.params->max_tokens >= knobs_.kv_quota.long_min_tokens) c.long_kv_blocks += blocks;
  }
  int64_t oldest_ns = m.now_ns;
  for (SeqId seq : waiting_) {
    const Request& r = *requests_.at(seq);
    ++classes[r.metadata.priority].num_waiting;
    oldest_ns = std::min(oldest_ns, r.arrival_ns);
  }
  m.oldest_waiting_ms = static_cast<double>(m.now_ns - oldest_ns) * 1e-6;
  for (auto& [priority, c] : classes) {
    c.priority = priority;
    m.classes.push_back(c);
  }
  return m;
}

SchedulerSnapshot Scheduler::snapshot() const {
  const kv::BlockPool& pool = kv_.pool();
  SchedulerSnapshot out;
  out.num_running = num_running();
  out.num_waiting = num_waiting();
  for (SeqId seq : waiting_) {
    const Request& r = *requests_.at(seq);
    ++out.num_waiting_by_priority[r.metadata.priority];
    out.num_waiting_tokens += r.num_tokens();
  }
  out.kv_total_blocks = pool.num_blocks();
  out.kv_used_blocks = pool.num_blocks() - pool.num_free_blocks();
  out.kv_usage = pool.usage();
  for (const auto& [precision, count] : pool.live_blocks())
    if (count > 0) out.kv_blocks_by_precision[kv::kv_precision_name(precision)] = count;
  out.kv_requantized_blocks = pool.counters().requantized_blocks;
  for (const auto& [precision, count] : pool.counters().requantized_to)
    out.kv_requantized_by_precision[kv::kv_precision_name(precision)] = count;
  out.kv_full_precision = kv::kv_precision_name(config_.kv_layout.full);
  out.kv_capacity_tokens = pool.num_blocks() * pool.block_size();
  for (const optim::Policy* p : policies_.all()) {
    std::vector<std::pair<std::string, double>> counters;
    for (const auto& c : p->counters()) counters.emplace_back(c.name, c.value);
    out.optimizer_counters.emplace_back(std::string(p->name()), std::move(counters));
  }
  out.num_steps = stats_.num_steps;
  out.num_preemptions = stats_.num_preemptions;
  out.num_prompt_tokens = stats_.num_prompt_tokens_computed;
  out.num_generation_tokens = stats_.num_generated_tokens;
  out.prefix_cache_queries = pool.counters().prefix_queries_tokens;
  out.prefix_cache_hits = pool.counters().prefix_hits_tokens;
  out.preemptions_by_mode = stats_.preemptions_by_mode;
  out.preempted_ns = stats_.preempted_ns;
  const kv::HostTier& host = kv_.host();
  const kv::KvTierCounters& tier = kv_.tier_counters();
  out.num_swapped = kv_.num_swapped();
  out.kv_swapped_out_blocks = tier.swapped_out_blocks;
  out.kv_swapped_in_blocks = tier.swapped_in_blocks;
  out.host_swap_total_blocks = host.num_swap_blocks();
  out.host_swap_used_blocks = host.num_swap_blocks() - host.num_free_swap_blocks();
  out.host_prefix_total_blocks = host.num_prefix_blocks();
  out.host_prefix_cached_blocks = host.num_cached_prefix_blocks();
  out.host_prefix_cache_queries = tier.host_prefix_queries_tokens;
  out.host_prefix_cache_hits = tier.host_prefix_hits_tokens;
  return out;
}

}  // namespace optimate::sched
