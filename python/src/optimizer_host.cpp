#include "optimizer_host.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "core/logging.h"
#include "metrics/priority_labels.h"
#include "optim/priority_levels.h"

namespace optimate::python {
namespace {

// The guard's time from a Python callable (a fake clock in tests); the host is only ever
// called with the GIL held, so calling back into Python is safe.
class PythonClock final : public Clock {
 public:
  explicit PythonClock(nb::object now_ns) : now_ns_(std::move(now_ns)) {}
  int64_t now_ns() const override { return nb::cast<int64_t>(now_ns_()); }

 private:
  nb::object now_ns_;
};

optim::BlockedOn parse_blocked_on(const std::string& text) {
  if (text == "max_num_seqs") return optim::BlockedOn::kMaxNumSeqs;
  if (text == "kv_blocks") return optim::BlockedOn::kKvBlocks;
  fail(ErrorCode::kInvalidArgument, "blocked_on must be 'max_num_seqs' or 'kv_blocks', got '{}'", text);
}

PolicySlot parse_slot(const std::string& text) {
  if (text == "queue") return PolicySlot::kQueue;
  if (text == "batch") return PolicySlot::kBatch;
  if (text == "preempt") return PolicySlot::kPreempt;
  if (text == "controller") return PolicySlot::kController;
  fail(ErrorCode::kInvalidArgument, "slot must be queue, batch, preempt or controller, got '{}'", text);
}

FallbackReason parse_reason(const std::string& text) {
  for (FallbackReason r : {FallbackReason::kError, FallbackReason::kStepFailure, FallbackReason::kWatchdog,
                           FallbackReason::kThroughput, FallbackReason::kController})
    if (fallback_reason_name(r) == text) return r;
  fail(ErrorCode::kInvalidArgument, "unknown fallback reason '{}'", text);
}

// The optimate:* families that mean something for another engine's scheduler. The registry also
// holds the vllm:* series ServingMetrics defines (vLLM exports its own) and Optimate's KV-tier
// series, which such an engine does not have.
constexpr std::string_view kExported[] = {
    "optimate:num_requests_waiting_by_priority", "optimate:request_queue_time_by_priority_seconds",
    "optimate:batch_size", "optimate:kv_cache_used_blocks", "optimate:kv_cache_total_blocks",
    "optimate:optimizer_counter", "optimate:optimizer_events", "optimate:optimizer_seconds",
    "optimate:optimizer_fallbacks", "optimate:config_version"};

bool exported(std::string_view name) {
  for (std::string_view suffix : {"_bucket", "_count", "_sum", "_total"})
    if (name.ends_with(suffix)) {
      std::string_view stem = name.substr(0, name.size() - suffix.size());
      if (std::find(std::begin(kExported), std::end(kExported), stem) != std::end(kExported)) return true;
    }
  return std::find(std::begin(kExported), std::end(kExported), name) != std::end(kExported);
}

std::string exported_families(const std::string& text) {
  std::istringstream in(text);
  std::string out;
  std::string line;
  while (std::getline(in, line)) {
    std::string_view name = line;
    if (name.starts_with("# HELP ") || name.starts_with("# TYPE ")) name.remove_prefix(7);
    name = name.substr(0, name.find_first_of("{ "));
    if (!exported(name)) continue;
    out += line;
    out += '\n';
  }
  return out;
}

}  // namespace

OptimizerHost::OptimizerHost(OptimizerHostOptions options, nb::object clock)
    : options_(std::move(options)),
      clock_(clock.is_none() ? std::shared_ptr<Clock>(std::make_shared<SteadyClock>())
                             : std::make_shared<PythonClock>(std::move(clock))),
      guard_(std::make_shared<GuardContext>()) {
  guard_->clock = clock_;
  guard_->engine_clock = clock_;
  guard_->watchdog_ms = options_.watchdog_ms;
  guard_->watchdog_calls = options_.watchdog_calls;
  guard_->priority_order = options_.priority_order;
  optim::BuildContext context;
  context.priority_order = options_.priority_order;
  optimizers_ = std::make_unique<OptimizerSet>(optim::OptimizerRegistry::with_builtin(), context, guard_);
  optimizers_->configure(options_.optimizers);  // Error naming an unknown optimizer or a bad option
  serving_ = std::make_unique<metrics::ServingMetrics>(registry_, options_.model_name,
                                                       std::max<int64_t>(options_.max_model_len, 1));
  optimizer_metrics_ = std::make_unique<metrics::OptimizerMetrics>(registry_, options_.model_name);
  optimizer_metrics_->set_config_version(1);
  after_change();
}

std::string OptimizerHost::owner(const std::string& slot) const { return optimizers_->owner(parse_slot(slot)); }

template <typename Call>
auto OptimizerHost::with_knobs(OwnedSchedulerView& view, Call&& call) {
  view.knobs = knobs_;
  return call(view.refreshed());
}

optim::BatchDecision OptimizerHost::decide(OwnedSchedulerView& view) {
  const auto policy = optimizers_->policies().batch;
  return with_knobs(view, [&](const optim::SchedulerView& v) { return policy->decide(v); });
}

std::vector<int64_t> OptimizerHost::order_waiting(OwnedSchedulerView& view) {
  const auto policy = optimizers_->policies().queue;
  return with_knobs(view, [&](const optim::SchedulerView& v) { return policy->order_waiting(v); });
}

std::optional<int64_t> OptimizerHost::preempt_for(OwnedSchedulerView& view, int64_t waiting_index,
                                                  const std::string& blocked_on) {
  const optim::BlockedOn on = parse_blocked_on(blocked_on);
  if (waiting_index < 0 || waiting_index >= static_cast<int64_t>(view.waiting_items.size()))
    fail(ErrorCode::kInvalidArgument, "waiting_index {} is outside the {} waiting", waiting_index,
         view.waiting_items.size());
  const auto policy = optimizers_->policies().queue;
  return with_knobs(view, [&](const optim::SchedulerView& v) { return policy->preempt_for(v, waiting_index, on); });
}

int64_t OptimizerHost::choose_victim(OwnedSchedulerView& view, const std::vector<int64_t>& candidates) {
  if (candidates.empty()) fail(ErrorCode::kInvalidArgument, "choose_victim needs at least one candidate");
  for (int64_t c : candidates)
    if (c < 0 || c >= static_cast<int64_t>(view.running_items.size()))
      fail(ErrorCode::kInvalidArgument, "candidate {} is outside the {} running", c, view.running_items.size());
  const auto policy = optimizers_->policies().preempt;
  return with_knobs(view, [&](const optim::SchedulerView& v) { return policy->choose_victim(v, candidates); })
      .running_index;
}

std::vector<HostEvent> OptimizerHost::take_faults(int64_t now_ns) {
  std::vector<HostEvent> out;
  for (const auto& [name, fault] : optimizers_->take_faults(now_ns)) {
    spdlog::warn("optimizer '{}' falls back to vLLM's own scheduling ({}): {}", name,
                 fallback_reason_name(fault.reason), fault.detail);
    out.push_back({name, "fallback", std::string(fallback_reason_name(fault.reason)), fault.detail});
  }
  if (!out.empty()) after_change();
  return out;
}

bool OptimizerHost::fall_back(const std::string& name, const std::string& reason, const std::string& detail,
                              int64_t now_ns) {
  if (!optimizers_->fall_back(name, {parse_reason(reason), detail}, now_ns)) return false;
  spdlog::warn("optimizer '{}' falls back to vLLM's own scheduling ({}): {}", name, reason, detail);
  after_change();
  return true;
}

void OptimizerHost::set_optimizer(const OptimizerSpec& spec) {
  if (!spec.enabled) {
    // Options stored while disabled must build too, or enabling them later fails.
    OptimizerSpec probe = spec;
    probe.enabled = true;
    optim::BuildContext context;
    context.priority_order = options_.priority_order;
    optim::OptimizerRegistry::with_builtin().build(probe, context);
  }
  optimizers_->set(spec);
  after_change();
}

void OptimizerHost::rollback() {
  optimizers_->rollback();
  after_change();
}

void OptimizerHost::restore() {
  optimizers_->restore();
  after_change();
}

std::vector<OptimizerState> OptimizerHost::states() const { return optimizers_->states(); }

void OptimizerHost::after_change() {
  const auto& controller = optimizers_->policies().controller;
  if (!controller) {
    // What a controller moved goes back when it stops.
    knobs_ = {};
    window_.reset();
  } else if (!window_ || window_->window_ns() != static_cast<int64_t>(controller->window_ms() * 1e6)) {
    window_ = std::make_unique<MetricsWindow>(static_cast<int64_t>(controller->window_ms() * 1e6),
                                              static_cast<int64_t>(controller->interval_ms() * 1e6));
  }
  update_priority_labels();
}

std::optional<double> OptimizerHost::controller_interval_ms() const {
  const auto& controller = optimizers_->policies().controller;
  if (!controller) return std::nullopt;
  return controller->interval_ms();
}

optim::KnobChanges OptimizerHost::tick(optim::MetricsView metrics, const optim::Knobs& limits) {
  const auto controller = optimizers_->policies().controller;
  if (!controller) return {};
  if (window_) metrics.window = window_->snapshot(metrics.now_ns);
  optim::Knobs knobs = limits;
  knobs.policy = knobs_;
  optim::KnobChanges changes = controller->tick(metrics, knobs);
  if (changes.policy) knobs_ = *changes.policy;
  for (const optim::KnobAction& a : changes.actions)
    spdlog::info("controller '{}': {} {} -> {} ({})", controller->name(), a.knob, a.from, a.to, a.reason);
  for (const std::string& name : changes.disable_optimizers)
    fall_back(name, "controller", "disabled by controller '" + std::string(controller->name()) + "'",
              metrics.now_ns);
  return changes;
}

void OptimizerHost::on_arrival(const std::string& request_id, int64_t arrival_ns, int64_t now_ns) {
  if (window_) window_->on_arrival(request_id, 1, arrival_ns, now_ns);
}

void OptimizerHost::on_output(const std::string& request_id, int64_t num_new_tokens, bool finished,
                              int64_t now_ns) {
  if (!window_) return;
  sched::RequestOutput out;
  out.request_id = request_id;
  out.new_token_ids.assign(static_cast<size_t>(std::max<int64_t>(num_new_tokens, 0)), 0);
  out.finished = finished;
  window_->on_output(out, now_ns);
}

void OptimizerHost::on_step(int64_t now_ns, int64_t step_ns, int64_t prompt_tokens, int64_t generated_tokens) {
  if (window_) window_->on_step(now_ns, step_ns, prompt_tokens, generated_tokens);
}

void OptimizerHost::update_priority_labels() {
  std::optional<OptimizerSpec> priority;
  for (const OptimizerSpec& spec : optimizers_->active_specs())
    if (spec.name == "priority" && spec.enabled) priority = spec;
  if (!priority) {
    serving_->set_priority_labeler(metrics::fixed_priority_labeler(options_.priority_order));
    return;
  }
  optim::OptionReader reader(*priority);
  const optim::PriorityOptions levels = optim::PriorityOptions::read(reader, options_.priority_order);
  serving_->set_priority_labeler([levels](EnginePriority p) { return levels.level_name(levels.level_of(p)); });
}

void OptimizerHost::record_step(int64_t batch_size) {
  metrics::StepStats step;
  step.batch_size = batch_size;
  serving_->record_step(step);
}

void OptimizerHost::record_queue_time(int64_t priority, double queue_s) {
  metrics::FinishedRequestStats r;
  r.finish_reason = "stop";
  r.priority = EnginePriority{priority};
  r.queue_s = queue_s;
  serving_->record_finished(r);
}

void OptimizerHost::record_event(const std::string& optimizer, const std::string& event) {
  serving_->record_optimizer_event(optimizer, event);
}

void OptimizerHost::set_queue_state(const std::map<int64_t, int64_t>& waiting_by_priority, int64_t kv_used_blocks,
                                    int64_t kv_total_blocks) {
  queue_state_.num_waiting_by_priority.clear();
  for (const auto& [priority, count] : waiting_by_priority) queue_state_.num_waiting_by_priority[EnginePriority{priority}] = count;
  queue_state_.kv_used_blocks = kv_used_blocks;
  queue_state_.kv_total_blocks = kv_total_blocks;
}

std::string OptimizerHost::metrics_text() {
  metrics::SchedulerGauges s = queue_state_;
  for (const OptimizerState& state : optimizers_->states()) {
    if (state.counters.empty()) continue;
    std::vector<std::pair<std::string, double>> counters;
    for (const optim::PolicyCounter& c : state.counters) counters.emplace_back(c.name, c.value);
    s.optimizer_counters.emplace_back(state.spec.name, std::move(counters));
  }
  serving_->set_scheduler_state(s);
  optimizer_metrics_->set_seconds(optimizers_->seconds());
  optimizer_metrics_->set_fallbacks(optimizers_->fallback_counts());
  return exported_families(registry_.render());
}

}  // namespace optimate::python
