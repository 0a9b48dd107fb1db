// Optimate's optimizers run by another engine's scheduler (the vLLM plugin, optimate.vllm): the
// same registry, policies and guards the native engine runs (engine/optimizer_set.h,
// engine/policy_guard.h), the controller's window (engine/metrics_window.h) and the optimate:*
// series (metrics/), behind calls that take the views the caller fills from its own state.
//
// Every policy call goes through its guard: an optimizer that throws, answers with an
// impossible decision or trips the watchdog gets the baseline's answer for that call, and
// take_faults() disables it between steps. Called with the GIL held, from one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>

#include "engine/metrics_window.h"
#include "engine/optimizer_set.h"
#include "metrics/optimizer_metrics.h"
#include "metrics/registry.h"
#include "metrics/serving_metrics.h"
#include "policy_views.h"

namespace optimate::python {

namespace nb = nanobind;

struct OptimizerHostOptions {
  std::vector<OptimizerSpec> optimizers;
  PriorityOrder priority_order = PriorityOrder::kLowerFirst;  // vLLM's clients
  double watchdog_ms = 250.0;  // 0: off
  int64_t watchdog_calls = 3;
  std::string model_name;
  int64_t max_model_len = 0;
};

// A fallback or another change of the optimizers, for the caller to log and count.
struct HostEvent {
  std::string optimizer;
  std::string event;   // "fallback"
  std::string reason;  // fallback_reason_name()
  std::string detail;
};

class OptimizerHost {
 public:
  // `clock`: a Python callable returning the policies' time in ns (the guard's watchdog reads
  // it); None: the steady clock.
  OptimizerHost(OptimizerHostOptions options, nb::object clock);

  // Which optimizer fills a slot ("queue", "batch", "preempt", "controller"); "" for the
  // baseline.
  std::string owner(const std::string& slot) const;

  optim::BatchDecision decide(OwnedSchedulerView& view);
  std::vector<int64_t> order_waiting(OwnedSchedulerView& view);
  std::optional<int64_t> preempt_for(OwnedSchedulerView& view, int64_t waiting_index, const std::string& blocked_on);
  int64_t choose_victim(OwnedSchedulerView& view, const std::vector<int64_t>& candidates);

  // Between steps: disables each optimizer whose guard noted a fault.
  std::vector<HostEvent> take_faults(int64_t now_ns);
  // Disables `name` for a fault found outside its guards (the caller's own code failed while
  // running it); false when it is not enabled.
  bool fall_back(const std::string& name, const std::string& reason, const std::string& detail, int64_t now_ns);
  void set_optimizer(const OptimizerSpec& spec);
  void rollback();
  void restore();
  std::vector<OptimizerState> states() const;
  const optim::PolicyKnobs& policy_knobs() const { return knobs_; }

  // The controller, when an optimizer fills its slot: its tick interval, and one tick on the
  // caller's metrics (the window is the host's own) and limits. Policy knobs it moves apply
  // to the host's next views; the limits come back for the caller to apply.
  std::optional<double> controller_interval_ms() const;
  optim::KnobChanges tick(optim::MetricsView metrics, const optim::Knobs& limits);
  // The controller's window: events of the caller's engine.
  void on_arrival(const std::string& request_id, int64_t arrival_ns, int64_t now_ns);
  void on_output(const std::string& request_id, int64_t num_new_tokens, bool finished, int64_t now_ns);
  void on_step(int64_t now_ns, int64_t step_ns, int64_t prompt_tokens, int64_t generated_tokens);

  // optimate:* series. Queue times and waiting counts are by priority in the engine's order
  // (the caller converted its clients' values, as for the views).
  void record_step(int64_t batch_size);
  void record_queue_time(int64_t priority, double queue_s);
  void record_event(const std::string& optimizer, const std::string& event);
  void set_queue_state(const std::map<int64_t, int64_t>& waiting_by_priority, int64_t kv_used_blocks,
                       int64_t kv_total_blocks);
  // The optimate:* families in Prometheus text format.
  std::string metrics_text();

 private:
  template <typename Call>
  auto with_knobs(OwnedSchedulerView& view, Call&& call);
  void update_priority_labels();
  void after_change();

  OptimizerHostOptions options_;
  std::shared_ptr<Clock> clock_;
  std::shared_ptr<GuardContext> guard_;
  std::unique_ptr<OptimizerSet> optimizers_;
  optim::PolicyKnobs knobs_;
  std::unique_ptr<MetricsWindow> window_;
  metrics::Registry registry_;
  std::unique_ptr<metrics::ServingMetrics> serving_;
  std::unique_ptr<metrics::OptimizerMetrics> optimizer_metrics_;
  metrics::SchedulerGauges queue_state_;
};

// One optimizer as GET /v1/optimizers lists it: name, enabled, baseline, options, counters,
// seconds_total, fallback ({reason, detail} or None), rolled_back.
nb::dict optimizer_state_dict(const OptimizerState& state);
// Every optimizer so.
nb::list optimizer_state_list(const std::vector<OptimizerState>& states);

void bind_optimizer_host(nb::module_& m);

}  // namespace optimate::python
