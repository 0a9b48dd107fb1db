// The engine's side of a Controller: the metrics it reads (the scheduler's figures, the
// priority classes and the window), the knobs it may move and how its changes apply, between
// steps and never past what the runner allocated.
#include <algorithm>
#include <map>

#include "core/logging.h"
#include "engine/engine.h"

namespace optimate {

optim::MetricsView Engine::metrics_view() const {
  optim::MetricsView m = scheduler_->metrics();
  const int64_t now = m.now_ns;
  m.num_kv_blocks = scheduler_->config().num_kv_blocks;
  const optim::KvQuota& quota = scheduler_->policy_knobs().kv_quota;
  std::map<EnginePriority, optim::ClassMetrics, std::greater<>> classes;
  for (sched::SeqId seq : scheduler_->running_queue()) {
    const sched::Request* r = scheduler_->find(seq);
    if (!r) continue;
    optim::ClassMetrics& c = classes[r->priority];
    ++c.num_running;
    const auto blocks = static_cast<int64_t>(scheduler_->kv().block_ids(seq).size());
    c.kv_blocks += blocks;
    if (r->params->max_tokens >= quota.long_min_tokens) c.long_kv_blocks += blocks;
  }
  int64_t oldest_ns = now;
  for (sched::SeqId seq : scheduler_->waiting_queue()) {
    const sched::Request* r = scheduler_->find(seq);
    if (!r) continue;
    ++classes[r->priority].num_waiting;
    oldest_ns = std::min(oldest_ns, r->arrival_ns);
  }
  m.oldest_waiting_ms = static_cast<double>(now - oldest_ns) * 1e-6;
  for (auto& [priority, c] : classes) {
    c.priority = priority;
    m.classes.push_back(c);
  }
  if (window_) m.window = window_->snapshot(now);
  return m;
}

void Engine::tick_controller() {
  const auto& controller = scheduler_->policies().controller;
  if (!controller) return;
  const int64_t now = clock_->now_ns();
  if (now < next_tick_ns_) return;
  next_tick_ns_ = now + static_cast<int64_t>(controller->interval_ms() * 1e6);
  const sched::SchedulerConfig& c = scheduler_->config();
  const StepCapacity capacity = runner_->capacity();
  optim::Knobs knobs;
  knobs.max_num_seqs = c.max_num_seqs;
  knobs.max_num_batched_tokens = c.max_num_batched_tokens;
  knobs.capacity_max_num_seqs = capacity.max_num_seqs;
  knobs.capacity_max_num_batched_tokens = capacity.max_num_batched_tokens;
  knobs.configured_max_num_seqs = config_.max_num_seqs;
  knobs.configured_max_num_batched_tokens = config_.max_num_batched_tokens;
  knobs.num_kv_blocks = c.num_kv_blocks;
  knobs.kv_finest_precision = c.kv_layout.finest;
  knobs.policy = scheduler_->policy_knobs();
  apply_knob_changes(controller->tick(metrics_view(), knobs));
}

void Engine::apply_knob_changes(const optim::KnobChanges& changes) {
  const sched::SchedulerConfig& c = scheduler_->config();
  if (changes.max_num_seqs || changes.max_num_batched_tokens) {
    // A controller's knob stops at what the runner holds, and at one.
    const StepCapacity capacity = runner_->capacity();
    set_limits(std::clamp<int64_t>(changes.max_num_seqs.value_or(c.max_num_seqs), 1, capacity.max_num_seqs),
               std::clamp<int64_t>(changes.max_num_batched_tokens.value_or(c.max_num_batched_tokens), 1,
                                   capacity.max_num_batched_tokens));
  }
  if (changes.policy) scheduler_->set_policy_knobs(*changes.policy);
  const std::string controller(scheduler_->policies().controller ? scheduler_->policies().controller->name() : "");
  for (const optim::KnobAction& a : changes.actions) {
    spdlog::info("controller '{}': {} {} -> {} ({})", controller, a.knob, a.from, a.to, a.reason);
    DecisionRecord r;
    r.event = "controller";
    r.optimizer = controller;
    r.reason = a.reason;
    r.with("knob", a.knob).with("from", a.from).with("to", a.to);
    for (const optim::PolicyCounter& f : a.figures) r.figures.emplace_back(f.name, f.value);
    record(std::move(r));
  }
  for (const std::string& name : changes.disable_optimizers)
    fall_back(name, FallbackReason::kController, "disabled by controller '" + controller + "'");
}

void Engine::reset_knobs() {
  scheduler_->set_limits(config_.max_num_seqs, config_.max_num_batched_tokens);
  scheduler_->set_policy_knobs({});
}

}  // namespace optimate
