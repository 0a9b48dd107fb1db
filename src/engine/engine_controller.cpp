// The engine's side of a Controller: the metrics it reads (the scheduler's figures and
// priority classes, and the engine's window), the knobs it may move and how its changes
// apply, between steps and never past what the runner allocated.
#include <algorithm>

#include "core/logging.h"
#include "engine/engine.h"

namespace optimate {

optim::MetricsView Engine::metrics_view() const {
  optim::MetricsView m = scheduler_->metrics();  // the queues and classes, the scheduler's figures
  if (window_) m.window = window_->snapshot(m.now_ns);
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
