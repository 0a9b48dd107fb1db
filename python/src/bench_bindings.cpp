#include "bench_bindings.h"

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bench/cost_model.h"
#include "bench/workload.h"
#include "bench/workload_toml.h"
#include "core/error.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace optimate::python {

namespace {

// The requests of a workload TOML (configs/workloads/*.toml) with "workload.KEY=VALUE"
// overrides, as `optimate bench` draws them: one dict per request, in arrival order, with the
// prompt's token ids.
nb::list workload_requests(const std::string& path, const std::vector<std::string>& overrides) {
  const bench::Workload w = bench::build_workload(bench::load_workload_spec(path, overrides));
  if (w.spec.conversation || w.spec.trace)
    fail(ErrorCode::kInvalidArgument, "{}: conversations and traces are not supported here", path);
  nb::list out;
  for (const bench::BenchRequest& r : w.requests) {
    nb::dict d;
    d["id"] = r.id;
    d["arrival_s"] = r.arrival_s;
    d["prompt_len"] = r.prompt_len;
    d["prompt_token_ids"] = r.prompt_token_ids;  // prefix groups share their first tokens
    d["max_tokens"] = r.max_tokens;
    d["priority"] = r.priority;
    d["priority_class"] = r.priority_class;
    out.append(d);
  }
  return out;
}

}  // namespace

void bind_bench(nb::module_& m) {
  m.def("workload_requests", &workload_requests, "path"_a, "overrides"_a = std::vector<std::string>{},
        "The requests of a workload TOML, as `optimate bench` draws them (dicts in arrival order).");
  nb::class_<bench::CostModel>(m, "CostModel",
                               "The step-time model of `optimate bench --backend sim`, from a cost profile JSON.")
      .def("__init__", [](bench::CostModel* self, const std::string& profile) {
             new (self) bench::CostModel(bench::load_cost_profile(profile));
           }, "profile"_a)
      .def("step_seconds",
           [](const bench::CostModel& c, const std::vector<std::pair<int64_t, int64_t>>& seqs) {
             std::vector<bench::SeqWork> work;
             work.reserve(seqs.size());
             for (const auto& [new_tokens, context] : seqs) {
               if (new_tokens < 1 || context < 0)
                 fail(ErrorCode::kInvalidArgument, "a sequence's new tokens must be >= 1 and its context >= 0");
               work.push_back({.num_new_tokens = new_tokens, .context_len = context});
             }
             return c.step_cost(work).seconds;
           },
           "seqs"_a, "Seconds of one step: a (new tokens, tokens already cached) pair per sequence.")
      .def_prop_ro("device", [](const bench::CostModel& c) { return c.profile().device; });
}

}  // namespace optimate::python
