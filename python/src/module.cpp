// optimate._core: the C++ engine for the Python package (python/optimate). The Python modules
// give it vLLM's shape; this layer converts values, maps errors and releases the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include "async_handle.h"
#include "bench_bindings.h"
#include "core/error.h"
#include "core/logging.h"
#include "engine_handle.h"
#include "engine_settings.h"
#include "optim/registry.h"
#include "optimizer_host.h"
#include "policy_views.h"
#include "request_row_cache.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace optimate::python {
namespace {

// optimate::Error -> ValueError for a bad argument, optimate.EngineError(message, code) else.
void translate_errors(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kInvalidArgument) {
      PyErr_SetString(PyExc_ValueError, e.what());
      return;
    }
    nb::object cls = nb::module_::import_("optimate.errors").attr("EngineError");
    nb::object error = cls(std::string(e.what()), std::string(error_code_name(e.code())));
    PyErr_SetObject(cls.ptr(), error.ptr());
  }
}

using SpecTuple = std::tuple<std::string, OptionMap, bool>;

OptimizerSpec optimizer_spec(const std::string& name, const OptionMap& options, bool enabled) {
  return OptimizerSpec{name, options, enabled};
}

nb::dict stats_dict(const EngineStats& s) {
  nb::dict d;
  d["num_running"] = s.num_running;
  d["num_waiting"] = s.num_waiting;
  d["kv_used_blocks"] = s.kv_used_blocks;
  d["kv_total_blocks"] = s.kv_total_blocks;
  d["num_steps"] = s.num_steps;
  d["num_preemptions"] = s.num_preemptions;
  d["num_prompt_tokens"] = s.num_prompt_tokens;
  d["num_generation_tokens"] = s.num_generation_tokens;
  d["prefix_cache_queries"] = s.prefix_cache_queries;
  d["prefix_cache_hits"] = s.prefix_cache_hits;
  return d;
}

nb::object stop_reason(const RequestOutput& o) {
  if (auto* id = std::get_if<int64_t>(&o.stop_reason)) return nb::int_(*id);
  if (auto* s = std::get_if<std::string>(&o.stop_reason)) return nb::str(s->c_str(), s->size());
  return nb::none();
}

void bind_outputs(nb::module_& m) {
  nb::class_<sched::TokenLogprob>(m, "TokenLogprob")
      .def_ro("token_id", &sched::TokenLogprob::token_id)
      .def_ro("logprob", &sched::TokenLogprob::logprob)
      .def_ro("rank", &sched::TokenLogprob::rank);
  nb::class_<sched::TokenLogprobs>(m, "TokenLogprobs")
      .def_ro("sampled", &sched::TokenLogprobs::sampled)
      .def_ro("top", &sched::TokenLogprobs::top);
  nb::class_<RequestOutput>(m, "SequenceDelta",
                            "What one step produced for one sequence (the package accumulates these).")
      .def_ro("request_id", &RequestOutput::request_id)
      .def_ro("index", &RequestOutput::index)
      .def_ro("new_token_ids", &RequestOutput::new_token_ids)
      .def_ro("text", &RequestOutput::text)
      .def_ro("logprobs", &RequestOutput::logprobs)
      .def_ro("finished", &RequestOutput::finished)
      .def_prop_ro("finish_reason", [](const RequestOutput& o) -> std::optional<std::string> {
        if (o.finish_reason == FinishReason::kNone) return std::nullopt;
        return sched::finish_reason_name(o.finish_reason);
      })
      .def_prop_ro("stop_reason", &stop_reason)
      .def_prop_ro("num_prompt_tokens", [](const RequestOutput& o) { return o.usage.prompt_tokens; })
      .def_prop_ro("num_cached_tokens", [](const RequestOutput& o) { return o.usage.cached_tokens; })
      .def_ro("queue_ns", &RequestOutput::queue_ns);
}

void bind_engine(nb::module_& m) {
  nb::class_<EngineHandle>(m, "Engine")
      .def("__init__",
           [](EngineHandle* self, const OptionMap& settings, const std::vector<SpecTuple>& optimizers,
              const std::vector<std::tuple<std::string, std::string, nb::object>>& python_policies,
              bool async_mode) {
             std::vector<OptimizerSpec> specs;
             for (const auto& [name, options, enabled] : optimizers) specs.push_back({name, options, enabled});
             std::vector<PythonPolicySpec> policies;
             for (const auto& [name, kind, policy] : python_policies) policies.push_back({name, kind, policy});
             new (self) EngineHandle(settings, specs, policies, async_mode);
           },
           "settings"_a, "optimizers"_a, "python_policies"_a, "async_mode"_a = false)
      .def("encode", &EngineHandle::encode, "text"_a)
      .def("chat_prompt", &EngineHandle::chat_prompt, "messages"_a, "add_generation_prompt"_a = true)
      .def("add_request", [](EngineHandle& e, const std::string& id, const std::vector<int32_t>& prompt_ids,
                             nb::handle params, nb::handle metadata) {
        e.add_request(id, prompt_ids, sampling_params_from(params), request_metadata_from(metadata, e.priority_order()));
      }, "request_id"_a, "prompt_token_ids"_a, "params"_a, "metadata"_a = nb::none(),
      "metadata: {\"priority\": p, ...} in the clients' convention (RequestMetadata's fields), or None")
      .def("step", &EngineHandle::step, "Runs one step with the GIL released.")
      .def("abort", &EngineHandle::abort, "request_id"_a)
      .def("has_unfinished", &EngineHandle::has_unfinished)
      .def("set_optimizer", [](EngineHandle& e, const std::string& name, const OptionMap& options, bool enabled) {
        e.set_optimizer(optimizer_spec(name, options, enabled));
      }, "name"_a, "options"_a, "enabled"_a)
      .def("optimizer_states", [](const EngineHandle& e) { return optimizer_state_list(e.optimizer_states()); },
           "Each optimizer as GET /v1/optimizers lists it (fallbacks included).")
      .def("stats", [](const EngineHandle& e) { return stats_dict(e.stats()); })
      .def("take_policy_failure", &EngineHandle::take_policy_failure)
      .def_prop_ro("max_model_len", &EngineHandle::max_model_len)
      .def_prop_ro("num_kv_blocks", &EngineHandle::num_kv_blocks)
      .def_prop_ro("vocab_size", &EngineHandle::vocab_size)
      .def_prop_ro("description", &EngineHandle::description);

  nb::class_<AsyncHandle>(m, "AsyncEngine")
      .def(nb::init<EngineHandle&>(), "engine"_a)
      .def("submit", [](AsyncHandle& a, const std::string& id, const std::vector<int32_t>& prompt_ids,
                        nb::handle params, nb::handle metadata, nb::object on_output, nb::object on_error) {
        a.submit(id, prompt_ids, sampling_params_from(params), request_metadata_from(metadata, a.priority_order()),
                 std::move(on_output), std::move(on_error));
      }, "request_id"_a, "prompt_token_ids"_a, "params"_a, "metadata"_a, "on_output"_a, "on_error"_a)
      .def("abort", &AsyncHandle::abort, "request_id"_a)
      .def("set_optimizer", [](AsyncHandle& a, const std::string& name, const OptionMap& options, bool enabled) {
        a.set_optimizer(optimizer_spec(name, options, enabled));
      }, "name"_a, "options"_a, "enabled"_a)
      .def("optimizer_states", [](AsyncHandle& a) { return optimizer_state_list(a.optimizer_states()); },
           "Each optimizer as GET /v1/optimizers lists it (fallbacks included), asked between steps.")
      .def("stats", [](const AsyncHandle& a) { return stats_dict(a.stats()); })
      .def("running", &AsyncHandle::running)
      .def("shutdown", &AsyncHandle::shutdown, "drain"_a = true);
}

void bind_settings(nb::module_& m) {
  m.def("engine_settings", [] {
    nb::list out;
    for (const EngineSetting& s : engine_settings())
      out.append(nb::make_tuple(s.name, s.type, s.default_value, s.flag, s.help));
    return out;
  }, "The engine's settings: (name, type, default, CLI flag, help) per setting.");
  m.def("check_engine_settings", [](const OptionMap& values) { engine_config_from_settings(values); },
        "values"_a, "Raises ValueError naming the first bad setting.");
  m.def("builtin_optimizers", [] {
    const optim::OptimizerRegistry registry = optim::OptimizerRegistry::with_builtin();
    nb::list out;
    for (const std::string& name : registry.names()) {
      const optim::OptimizerInfo info = registry.describe(name);
      nb::list options;
      for (const auto& o : info.options) options.append(nb::make_tuple(o.key, o.fallback));
      out.append(nb::make_tuple(info.name, info.description, options));
    }
    return out;
  }, "The registry's optimizers: (name, description, [(option, default)]) each.");
  m.def("optimizer_options", [](const std::string& name, const OptionMap& options) {
    const optim::OptimizerInfo info = optim::OptimizerRegistry::with_builtin().describe(OptimizerSpec{name, options, true});
    nb::list out;
    for (const auto& o : info.options) out.append(nb::make_tuple(o.key, o.fallback));
    return out;
  }, "name"_a, "options"_a, "The options a built-in optimizer reads when given `options` (the priority optimizer's "
     "per-level bounds follow its levels): [(option, default)].");
  m.def("check_optimizer", [](const std::string& name, const OptionMap& options) {
    optim::OptimizerRegistry::with_builtin().build(OptimizerSpec{name, options, true});
  }, "name"_a, "options"_a, "Builds a built-in optimizer; raises for unknown or bad options.");
  m.def("sampling_defaults", [] {
    const SamplingParams d;
    nb::dict out;
    out["n"] = d.n;
    out["max_tokens"] = d.max_tokens;
    out["min_tokens"] = d.min_tokens;
    out["temperature"] = d.temperature;
    out["top_p"] = d.top_p;
    out["top_k"] = d.top_k;
    out["min_p"] = d.min_p;
    out["repetition_penalty"] = d.repetition_penalty;
    out["presence_penalty"] = d.presence_penalty;
    out["frequency_penalty"] = d.frequency_penalty;
    out["ignore_eos"] = d.ignore_eos;
    out["include_stop_str_in_output"] = d.include_stop_str_in_output;
    out["skip_special_tokens"] = d.skip_special_tokens;
    out["spaces_between_special_tokens"] = d.spaces_between_special_tokens;
    return out;
  }, "The engine's SamplingParams defaults.");
  m.def("check_sampling_params", [](nb::handle params) { sampling_params_from(params); }, "params"_a);
  m.def("engine_priority", [](const std::string& order, int64_t priority) {
    return to_engine_priority(parse_choice<PriorityOrder>(order, "order"), ClientPriority{priority}).value;
  }, "order"_a, "priority"_a, "A client's priority in the engine's order (larger is more important); `order` is how "
     "the clients' values point: higher-first or lower-first.");
  m.def("set_log_level", [](const std::string& level) { set_log_level(level); }, "level"_a,
        "trace, debug, info, warn, error or off");
}

}  // namespace
}  // namespace optimate::python

NB_MODULE(_core, m) {
  using namespace optimate::python;
  m.doc() = "Optimate's C++ engine (use the optimate package, not this module)";
  nb::register_exception_translator(&translate_errors);
  bind_settings(m);
  bind_outputs(m);
  bind_policy_views(m);
  bind_request_row_cache(m);
  bind_engine(m);
  bind_optimizer_host(m);
  bind_bench(m);
}
