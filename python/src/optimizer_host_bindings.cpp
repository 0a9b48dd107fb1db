// optimate._core.OptimizerHost and the configuration reader the vLLM plugin uses.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include "config/config_diff.h"
#include "config/engine_config.h"
#include "optimizer_host.h"

namespace optimate::python {
namespace {

using namespace nb::literals;
using SpecTuple = std::tuple<std::string, OptionMap, bool>;

std::vector<OptimizerSpec> specs_from(const std::vector<SpecTuple>& tuples) {
  std::vector<OptimizerSpec> out;
  for (const auto& [name, options, enabled] : tuples) out.push_back({name, options, enabled});
  return out;
}

}  // namespace

nb::dict optimizer_state_dict(const OptimizerState& s) {
  nb::dict d;
  d["name"] = s.spec.name;
  d["enabled"] = s.baseline || s.spec.enabled;
  d["baseline"] = s.baseline;
  nb::dict options;
  for (const auto& [k, v] : s.spec.options) options[nb::str(k.c_str())] = nb::cast(v);
  d["options"] = options;
  nb::dict counters;
  for (const auto& c : s.counters) counters[nb::str(c.name.c_str())] = c.value;
  d["counters"] = counters;
  d["seconds_total"] = s.seconds_total;
  if (s.fallback) {
    nb::dict f;
    f["reason"] = std::string(fallback_reason_name(s.fallback->reason));
    f["detail"] = s.fallback->detail;
    d["fallback"] = f;
  } else {
    d["fallback"] = nb::none();
  }
  d["rolled_back"] = s.rolled_back;
  return d;
}

nb::list optimizer_state_list(const std::vector<OptimizerState>& states) {
  nb::list out;
  for (const OptimizerState& s : states) out.append(optimizer_state_dict(s));
  return out;
}

namespace {

nb::dict changes_dict(const optim::KnobChanges& c) {
  nb::dict d;
  d["max_num_seqs"] = c.max_num_seqs ? nb::cast(*c.max_num_seqs) : nb::none();
  d["max_num_batched_tokens"] = c.max_num_batched_tokens ? nb::cast(*c.max_num_batched_tokens) : nb::none();
  nb::list actions;
  for (const optim::KnobAction& a : c.actions) actions.append(nb::make_tuple(a.knob, a.from, a.to, a.reason));
  d["actions"] = actions;
  d["disable_optimizers"] = nb::cast(c.disable_optimizers);
  return d;
}

// [optimizers.NAME] tables and the optimizer watchdog of a TOML file in `optimate serve`'s
// format; the [engine] keys it sets other than the watchdog are listed for the caller to report
// (vLLM's own flags set those).
nb::tuple read_optimizer_config(const std::string& text, const std::string& source) {
  const EngineConfig config = parse_engine_config_toml(text, source);
  nb::list specs;
  for (const OptimizerSpec& s : config.optimizers) specs.append(nb::make_tuple(s.name, s.options, s.enabled));
  nb::list other;
  for (const SettingDiff& d : diff_configs(EngineConfig{}, config))
    if (d.key != "optimizers" && d.key != "optimizer_watchdog_ms") other.append(d.key);
  return nb::make_tuple(specs, config.optimizer_watchdog_ms, other);
}

}  // namespace

void bind_optimizer_host(nb::module_& m) {
  nb::class_<OptimizerHost>(m, "OptimizerHost",
                            "Optimate's optimizers, guarded, for another engine's scheduler (optimate.vllm).")
      .def(
          "__init__",
          [](OptimizerHost* self, const std::vector<SpecTuple>& optimizers, const std::string& priority_order,
             double watchdog_ms, int64_t watchdog_calls, const std::string& model_name, int64_t max_model_len,
             nb::object clock) {
            OptimizerHostOptions o;
            o.optimizers = specs_from(optimizers);
            o.priority_order = parse_choice<PriorityOrder>(priority_order, "priority_order");
            o.watchdog_ms = watchdog_ms;
            o.watchdog_calls = watchdog_calls;
            o.model_name = model_name;
            o.max_model_len = max_model_len;
            new (self) OptimizerHost(std::move(o), std::move(clock));
          },
          "optimizers"_a, "priority_order"_a = "lower-first", "watchdog_ms"_a = 250.0, "watchdog_calls"_a = 3,
          "model_name"_a = "", "max_model_len"_a = 0, "clock"_a = nb::none())
      .def("owner", &OptimizerHost::owner, "slot"_a,
           "The optimizer filling a slot (queue, batch, preempt, controller); '' for the baseline.")
      .def("decide", &OptimizerHost::decide, "view"_a)
      .def("order_waiting", &OptimizerHost::order_waiting, "view"_a)
      .def("preempt_for", &OptimizerHost::preempt_for, "view"_a, "waiting_index"_a, "blocked_on"_a)
      .def("choose_victim", &OptimizerHost::choose_victim, "view"_a, "candidates"_a)
      .def(
          "take_faults",
          [](OptimizerHost& h, int64_t now_ns) {
            nb::list out;
            for (const HostEvent& e : h.take_faults(now_ns)) out.append(nb::make_tuple(e.optimizer, e.reason, e.detail));
            return out;
          },
          "now_ns"_a, "Disables each optimizer whose guard noted a fault: [(optimizer, reason, detail)].")
      .def("fall_back", &OptimizerHost::fall_back, "name"_a, "reason"_a, "detail"_a, "now_ns"_a)
      .def(
          "set_optimizer",
          [](OptimizerHost& h, const std::string& name, const OptionMap& options, bool enabled) {
            h.set_optimizer({name, options, enabled});
          },
          "name"_a, "options"_a, "enabled"_a)
      .def("rollback", &OptimizerHost::rollback)
      .def("restore", &OptimizerHost::restore)
      .def(
          "states",
          [](const OptimizerHost& h) { return optimizer_state_list(h.states()); },
          "Each optimizer as GET /v1/optimizers lists it.")
      .def_prop_ro("policy_knobs", &OptimizerHost::policy_knobs)
      .def_prop_ro("controller_interval_ms", &OptimizerHost::controller_interval_ms)
      .def(
          "tick",
          [](OptimizerHost& h, const optim::MetricsView& metrics, int64_t max_num_seqs, int64_t max_num_batched_tokens,
             int64_t configured_max_num_seqs, int64_t configured_max_num_batched_tokens, int64_t num_kv_blocks) {
            optim::Knobs k;
            k.max_num_seqs = max_num_seqs;
            k.max_num_batched_tokens = max_num_batched_tokens;
            // The engine's buffers are sized for what was configured: that is the ceiling.
            k.capacity_max_num_seqs = k.configured_max_num_seqs = configured_max_num_seqs;
            k.capacity_max_num_batched_tokens = k.configured_max_num_batched_tokens = configured_max_num_batched_tokens;
            k.num_kv_blocks = num_kv_blocks;
            return changes_dict(h.tick(metrics, k));
          },
          "metrics"_a, "max_num_seqs"_a, "max_num_batched_tokens"_a, "configured_max_num_seqs"_a,
          "configured_max_num_batched_tokens"_a, "num_kv_blocks"_a)
      .def("on_arrival", &OptimizerHost::on_arrival, "request_id"_a, "arrival_ns"_a, "now_ns"_a)
      .def("on_output", &OptimizerHost::on_output, "request_id"_a, "num_new_tokens"_a, "finished"_a, "now_ns"_a)
      .def("on_step", &OptimizerHost::on_step, "now_ns"_a, "step_ns"_a, "prompt_tokens"_a, "generated_tokens"_a)
      .def("record_step", &OptimizerHost::record_step, "batch_size"_a)
      .def("record_queue_time", &OptimizerHost::record_queue_time, "priority"_a, "queue_s"_a)
      .def("record_event", &OptimizerHost::record_event, "optimizer"_a, "event"_a)
      .def("set_queue_state", &OptimizerHost::set_queue_state, "waiting_by_priority"_a, "kv_used_blocks"_a,
           "kv_total_blocks"_a)
      .def("metrics_text", &OptimizerHost::metrics_text, "The optimate:* series, Prometheus text format.");
  m.def("read_optimizer_config", &read_optimizer_config, "text"_a, "source"_a,
        "A TOML file's [optimizers.NAME] tables: ([(name, options, enabled)], optimizer_watchdog_ms, "
        "[other [engine] keys it sets]).");
}

}  // namespace optimate::python
