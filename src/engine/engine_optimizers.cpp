// The engine's side of its optimizers: enabling and disabling them between steps, falling back
// from one that misbehaves, rollback and restore, and applying a new configuration.
#include <algorithm>
#include <string>
#include <vector>

#include "config/config_diff.h"
#include "core/error.h"
#include "core/logging.h"
#include "engine/engine.h"
#include "kv/kv_layout.h"
#include "kv/kv_precision.h"
#include "optim/kv_quant_policy.h"

namespace optimate {
namespace {

// Only optimizers that shape how a step runs (its KV precision, its kernels) can slow it: the
// ones the throughput guard watches.
std::vector<std::string> step_shapers(const OptimizerSet& optimizers) {
  std::vector<std::string> shapers;
  for (const optim::PolicySlotInfo& info : optim::kPolicySlots)
    if (const std::string& owner = optimizers.owner(info.slot); info.shapes_steps && !owner.empty() &&
        std::find(shapers.begin(), shapers.end(), owner) == shapers.end())
      shapers.push_back(owner);
  return shapers;
}

}  // namespace

void Engine::record(DecisionRecord record) const {
  if (!decisions_) return;
  record.t_s = clock_->now_s();
  decisions_->write(record);
}

void Engine::apply_hot_settings() {
  guard_->watchdog_ms = config_.optimizer_watchdog_ms;
  choose_step_fn();
}

void Engine::apply_policies() {
  const bool had_controller = static_cast<bool>(scheduler_->policies().controller);
  scheduler_->set_policies(optimizers_->policies());
  const auto& controller = scheduler_->policies().controller;
  if (!controller) {
    // What a controller moved goes back to the configuration when it stops.
    if (had_controller) reset_knobs();
    window_.reset();
  } else if (!window_ || window_->window_ns() != static_cast<int64_t>(controller->window_ms() * 1e6)) {
    window_ = std::make_unique<MetricsWindow>(static_cast<int64_t>(controller->window_ms() * 1e6),
                                              static_cast<int64_t>(controller->interval_ms() * 1e6));
    next_tick_ns_ = 0;
  }
  if (throughput_) throughput_->watch(step_shapers(*optimizers_), config_.optimizer_min_throughput_ratio);
  list_observers();
  apply_kernels();
}

void Engine::check_kv_layout(const std::vector<OptimizerSpec>& specs) const {
  std::vector<OptimizerSpec> enabled;
  for (const OptimizerSpec& s : specs)
    if (s.enabled) enabled.push_back(s);
  const optim::KvLayoutRequest request = optim::kv_layout_request(enabled);
  if (!request.finest) return;
  const kv::KvLayout& layout = scheduler_->config().kv_layout;
  if (layout.dynamic() && layout.holds(*request.finest)) return;
  fail(ErrorCode::kInvalidArgument,
       "optimizers.kv_quant needs a KV cache laid out for {} blocks, and this one was laid out at start for {}: "
       "restart with the optimizer configured (its `bits` sets the finest precision the cache holds)",
       kv::kv_precision_name(*request.finest),
       layout.finest ? fmt::format("{} at the finest", kv::kv_precision_name(*layout.finest))
                     : fmt::format("{} blocks only", kv::kv_precision_name(layout.base)));
}

void Engine::set_optimizer(const OptimizerSpec& spec) {
  if (spec.enabled) {
    check_kernels({spec});
    check_kv_layout({spec});
  }
  optimizers_->set(spec);
  config_.optimizers = optimizers_->good_configuration();
  apply_policies();
  spdlog::info("optimizer '{}' {}", spec.name, spec.enabled ? "enabled" : "disabled");
}

std::vector<OptimizerCounters> Engine::optimizer_counters() const {
  std::vector<OptimizerCounters> out;
  for (const optim::Policy* p : scheduler_->policies().all())
    out.push_back({std::string(p->name()), p->counters()});
  return out;
}

void Engine::fall_back(const std::string& optimizer, FallbackReason reason, const std::string& detail) {
  if (!optimizers_->fall_back(optimizer, {reason, detail}, clock_->now_ns())) return;
  spdlog::warn("optimizer '{}' falls back to the baseline ({}): {}", optimizer, fallback_reason_name(reason), detail);
  DecisionRecord r;
  r.event = "fallback";
  r.optimizer = optimizer;
  r.reason = std::string(fallback_reason_name(reason));
  r.with("detail", detail);
  record(std::move(r));
  apply_policies();
}

void Engine::take_faults() {
  const auto faults = optimizers_->take_faults(clock_->now_ns());
  if (faults.empty()) return;
  for (const auto& [name, fault] : faults) {
    spdlog::warn("optimizer '{}' falls back to the baseline ({}): {}", name, fallback_reason_name(fault.reason),
                 fault.detail);
    DecisionRecord r;
    r.event = "fallback";
    r.optimizer = name;
    r.reason = std::string(fallback_reason_name(fault.reason));
    r.with("detail", fault.detail);
    record(std::move(r));
  }
  apply_policies();
}

sched::StepPlan Engine::schedule_guarded() {
  guard_->last_called.reset();
  try {
    return scheduler_->schedule();
  } catch (const Error& e) {
    // The scheduler refused what the policy that ran last asked for (a mode or precision the
    // mechanism does not have): that optimizer falls back and the step is planned again.
    const std::shared_ptr<OptimizerHealth> suspect = guard_->last_called;
    if (!suspect || suspect->baseline) throw;
    fall_back(suspect->optimizer, FallbackReason::kStepFailure, e.what());
    return scheduler_->schedule();
  }
}

void Engine::rollback_optimizers(const std::string& reason) {
  optimizers_->rollback();
  apply_policies();
  reset_knobs();
  spdlog::warn("every optimizer rolled back to the baseline: {}", reason);
  DecisionRecord r;
  r.event = "rollback";
  r.optimizer = "engine";
  r.reason = reason;
  record(std::move(r));
}

void Engine::restore_optimizers() {
  optimizers_->restore();
  apply_policies();
  spdlog::info("optimizers restored to the last good configuration: {}",
               optimizer_list(optimizers_->good_configuration()));
  DecisionRecord r;
  r.event = "restore";
  r.optimizer = "engine";
  r.reason = "admin request";
  r.with("optimizers", optimizer_list(optimizers_->good_configuration()));
  record(std::move(r));
}

ConfigApplyReport Engine::apply_config(const EngineConfig& next) {
  // Everything is checked before anything changes.
  next.validate();
  check_kernels(next.optimizers);
  check_kv_layout(next.optimizers);
  const StepCapacity capacity = runner_->capacity();
  if (next.max_num_seqs > capacity.max_num_seqs || next.max_num_batched_tokens > capacity.max_num_batched_tokens)
    fail(ErrorCode::kInvalidArgument,
         "max-num-seqs {} / max-num-batched-tokens {} exceed what the runner allocated ({} / {})",
         next.max_num_seqs, next.max_num_batched_tokens, capacity.max_num_seqs, capacity.max_num_batched_tokens);
  ConfigApplyReport report;
  // The optimizers as they stand (after fallbacks) count as changed only against the good
  // configuration: a reload of the same file does not undo a fallback.
  EngineConfig active = config_;
  active.optimizers = optimizers_->good_configuration();
  for (SettingDiff& d : diff_configs(active, next)) (d.hot ? report.applied : report.needs_restart).push_back(d);
  for (const SettingDiff& d : report.needs_restart)
    spdlog::warn("configuration: {} changed ({} -> {}) but takes a restart; not applied", d.key, d.from, d.to);
  if (report.applied.empty()) {
    report.version = config_version_;
    return report;
  }
  const bool limits_changed = next.max_num_seqs != config_.max_num_seqs ||
                              next.max_num_batched_tokens != config_.max_num_batched_tokens;
  const bool optimizers_changed = !same_optimizers(active.optimizers, next.optimizers);
  if (optimizers_changed) optimizers_->configure(next.optimizers);
  copy_hot_settings(next, config_);
  config_.optimizers = optimizers_->good_configuration();
  if (limits_changed) scheduler_->set_limits(config_.max_num_seqs, config_.max_num_batched_tokens);
  apply_hot_settings();
  apply_policies();
  report.version = ++config_version_;
  DecisionRecord r;
  r.event = "config";
  r.optimizer = "engine";
  r.reason = "configuration applied";
  r.with("version", report.version);
  for (const SettingDiff& d : report.applied) r.with("set." + d.key, d.to);
  for (const SettingDiff& d : report.needs_restart) r.with("needs_restart." + d.key, d.to);
  record(std::move(r));
  for (const SettingDiff& d : report.applied) spdlog::info("configuration: {} {} -> {}", d.key, d.from, d.to);
  return report;
}

}  // namespace optimate
