#include "python_policies.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

namespace optimate::python {
namespace {

// Owning copies of the scheduler's views: Python may keep them after the call.
struct PyRequestView {
  int64_t seq_id = 0;
  std::string request_id;
  int64_t seq_index = 0;
  int64_t priority = 0;
  int64_t arrival_ns = 0;
  int64_t num_prompt_tokens = 0;
  int64_t num_output_tokens = 0;
  int64_t num_computed_tokens = 0;
  int64_t max_tokens = 0;
  int64_t num_blocks = 0;
  int64_t num_preemptions = 0;
  int64_t admitted_ns = -1;
  bool scheduled_this_step = false;
};

struct PySchedulerView {
  int64_t now_ns = 0;
  nb::list waiting;
  nb::list running;
  optim::KvView kv;
  int64_t max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t token_budget_left = 0;
  int64_t last_step_ns = 0;
};

nb::list request_list(std::span<const optim::RequestView> views) {
  nb::list out;
  for (const optim::RequestView& r : views)
    out.append(nb::cast(PyRequestView{r.seq_id, std::string(r.request_id), r.seq_index, r.priority,
                                      r.arrival_ns, r.num_prompt_tokens, r.num_output_tokens,
                                      r.num_computed_tokens, r.max_tokens, r.num_blocks,
                                      r.num_preemptions, r.admitted_ns, r.scheduled_this_step}));
  return out;
}

nb::object to_python(const optim::SchedulerView& v) {
  return nb::cast(PySchedulerView{v.now_ns, request_list(v.waiting), request_list(v.running), v.kv,
                                  v.max_num_seqs, v.max_num_batched_tokens, v.token_budget_left,
                                  v.last_step_ns});
}

// What every Python policy shares: the object, its name, failure reporting, counters.
class PythonPolicy {
 public:
  PythonPolicy(std::string name, std::shared_ptr<PyRef> object, std::shared_ptr<PolicyFailures> failures)
      : name_(std::move(name)), object_(std::move(object)), failures_(std::move(failures)) {}

 protected:
  const nb::object& object() const { return object_->get(); }
  void fail_call(const char* method, const std::string& why, nb::handle exception = nb::none()) const {
    failures_->record(fmt::format("Python policy '{}': {} {}; this call fell back to the baseline",
                                  name_, method, why),
                      exception);
  }
  std::vector<optim::PolicyCounter> python_counters() const {
    nb::gil_scoped_acquire gil;
    std::vector<optim::PolicyCounter> out;
    try {
      nb::object counters = object().attr("counters")();
      for (auto [key, value] : nb::cast<nb::dict>(counters))
        out.push_back({nb::cast<std::string>(key), nb::cast<double>(value)});
    } catch (nb::python_error& e) {
      fail_call("counters()", "raised", e.value());
    } catch (const nb::cast_error&) {
      fail_call("counters()", "did not return a dict of str to float");
    }
    return out;
  }

  std::string name_;
  std::shared_ptr<PyRef> object_;
  std::shared_ptr<PolicyFailures> failures_;
};

class PythonQueuePolicy final : public optim::QueuePolicy, PythonPolicy {
 public:
  using PythonPolicy::PythonPolicy;
  std::string_view name() const override { return name_; }
  std::vector<optim::PolicyCounter> counters() const override { return python_counters(); }

  std::vector<int64_t> order_waiting(const optim::SchedulerView& view) override {
    nb::gil_scoped_acquire gil;
    const int64_t n = static_cast<int64_t>(view.waiting.size());
    try {
      nb::object result = object().attr("order_waiting")(to_python(view));
      std::vector<int64_t> order = nb::cast<std::vector<int64_t>>(result);
      std::vector<bool> seen(static_cast<size_t>(n), false);
      for (int64_t i : order) {
        if (i < 0 || i >= n || seen[i]) {
          fail_call("order_waiting()", fmt::format("returned a bad or repeated index {} (of {} waiting)", i, n));
          return arrival_order(n);
        }
        seen[i] = true;
      }
      return order;
    } catch (nb::python_error& e) {
      fail_call("order_waiting()", "raised", e.value());
    } catch (const nb::cast_error&) {
      fail_call("order_waiting()", "did not return a list of int");
    }
    return arrival_order(n);
  }

  std::optional<int64_t> preempt_for(const optim::SchedulerView& view, int64_t waiting_index,
                                     optim::BlockedOn blocked_on) override {
    nb::gil_scoped_acquire gil;
    try {
      nb::object result = object().attr("preempt_for")(
          to_python(view), waiting_index,
          blocked_on == optim::BlockedOn::kMaxNumSeqs ? "max_num_seqs" : "kv_blocks");
      if (result.is_none()) return std::nullopt;
      const int64_t victim = nb::cast<int64_t>(result);
      if (victim < 0 || victim >= static_cast<int64_t>(view.running.size())) {
        fail_call("preempt_for()", fmt::format("chose running[{}] of {}", victim, view.running.size()));
        return std::nullopt;
      }
      return victim;
    } catch (nb::python_error& e) {
      fail_call("preempt_for()", "raised", e.value());
    } catch (const nb::cast_error&) {
      fail_call("preempt_for()", "did not return an int or None");
    }
    return std::nullopt;
  }

 private:
  static std::vector<int64_t> arrival_order(int64_t n) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[i] = i;
    return order;
  }
};

class PythonBatchPolicy final : public optim::BatchPolicy, PythonPolicy {
 public:
  using PythonPolicy::PythonPolicy;
  std::string_view name() const override { return name_; }
  std::vector<optim::PolicyCounter> counters() const override { return python_counters(); }

  optim::BatchDecision decide(const optim::SchedulerView& view) override {
    nb::gil_scoped_acquire gil;
    try {
      nb::object result = object().attr("decide")(to_python(view));
      if (nb::isinstance<nb::bool_>(result)) return {nb::cast<bool>(result), 0};
      return nb::cast<optim::BatchDecision>(result);
    } catch (nb::python_error& e) {
      fail_call("decide()", "raised", e.value());
    } catch (const nb::cast_error&) {
      fail_call("decide()", "did not return a bool or a BatchDecision");
    }
    return {};
  }
};

}  // namespace

PyRef::~PyRef() {
  if (!nb::is_alive()) {
    object_.release();  // the interpreter is gone: nothing to decrement
    return;
  }
  nb::gil_scoped_acquire gil;
  object_.reset();
}

PolicyFailures::~PolicyFailures() {
  if (!nb::is_alive()) {
    exception_.release();
    return;
  }
  nb::gil_scoped_acquire gil;
  exception_.reset();
}

void PolicyFailures::record(const std::string& message, nb::handle exception) {
  if (report_unraisable_) {
    nb::object error = nb::module_::import_("optimate.errors").attr("EngineError")(message, "policy");
    if (!exception.is_none()) PyException_SetCause(error.ptr(), exception.inc_ref().ptr());
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
    PyErr_WriteUnraisable(nullptr);
    return;
  }
  if (message_) return;  // the first failure explains the rest
  message_ = message;
  exception_ = nb::borrow(exception);
}

nb::object PolicyFailures::take() {
  if (!message_) return nb::none();
  nb::object out = nb::make_tuple(*message_, exception_);
  message_.reset();
  exception_ = nb::object();
  return out;
}

optim::PolicySet make_python_policy_set(const std::string& name, PythonPolicyKind kind,
                                        std::shared_ptr<PyRef> object,
                                        std::shared_ptr<PolicyFailures> failures) {
  optim::PolicySet set;
  if (kind == PythonPolicyKind::kQueue)
    set.queue = std::make_shared<PythonQueuePolicy>(name, std::move(object), std::move(failures));
  else
    set.batch = std::make_shared<PythonBatchPolicy>(name, std::move(object), std::move(failures));
  return set;
}

void bind_policy_views(nb::module_& m) {
  nb::class_<PyRequestView>(m, "RequestView", "A sequence as a policy sees it (a copy).")
      .def_ro("seq_id", &PyRequestView::seq_id, "the scheduler's id of this sequence (never reused)")
      .def_ro("request_id", &PyRequestView::request_id)
      .def_ro("seq_index", &PyRequestView::seq_index, "which of the request's n samples")
      .def_ro("priority", &PyRequestView::priority, "larger is more important")
      .def_ro("arrival_ns", &PyRequestView::arrival_ns, "engine clock")
      .def_ro("num_prompt_tokens", &PyRequestView::num_prompt_tokens)
      .def_ro("num_output_tokens", &PyRequestView::num_output_tokens)
      .def_ro("num_computed_tokens", &PyRequestView::num_computed_tokens)
      .def_ro("max_tokens", &PyRequestView::max_tokens)
      .def_ro("num_blocks", &PyRequestView::num_blocks, "KV blocks held now")
      .def_ro("num_preemptions", &PyRequestView::num_preemptions)
      .def_ro("admitted_ns", &PyRequestView::admitted_ns, "when it last entered the running set (-1: never)")
      .def_ro("scheduled_this_step", &PyRequestView::scheduled_this_step)
      .def("__repr__", [](const PyRequestView& r) {
        return fmt::format("RequestView(request_id='{}', seq_index={}, priority={}, num_prompt_tokens={}, "
                           "num_output_tokens={})", r.request_id, r.seq_index, r.priority,
                           r.num_prompt_tokens, r.num_output_tokens);
      });
  nb::class_<optim::KvView>(m, "KvView", "The KV block pool as a policy sees it.")
      .def_ro("num_blocks", &optim::KvView::num_blocks)
      .def_ro("num_free_blocks", &optim::KvView::num_free_blocks)
      .def_ro("block_size", &optim::KvView::block_size)
      .def("usage", &optim::KvView::usage, "share of blocks in use, in [0, 1]");
  nb::class_<PySchedulerView>(m, "SchedulerView",
                              "The scheduler's queues at one decision (a copy, valid after the call).")
      .def_ro("now_ns", &PySchedulerView::now_ns, "engine clock")
      .def_ro("waiting", &PySchedulerView::waiting, "list[RequestView]: preempted first, then by arrival")
      .def_ro("running", &PySchedulerView::running, "list[RequestView]: in admission order")
      .def_ro("kv", &PySchedulerView::kv)
      .def_ro("max_num_seqs", &PySchedulerView::max_num_seqs)
      .def_ro("max_num_batched_tokens", &PySchedulerView::max_num_batched_tokens)
      .def_ro("token_budget_left", &PySchedulerView::token_budget_left)
      .def_ro("last_step_ns", &PySchedulerView::last_step_ns, "duration of the last step that ran (0 before the first)");
  nb::class_<optim::BatchDecision>(m, "BatchDecision", "A batch policy's answer.")
      .def(
          "__init__",
          [](optim::BatchDecision* d, bool admit_waiting, int64_t retry_at_ns) {
            new (d) optim::BatchDecision{admit_waiting, retry_at_ns};
          },
          nb::arg("admit_waiting") = true, nb::arg("retry_at_ns") = 0)
      .def_rw("admit_waiting", &optim::BatchDecision::admit_waiting, "False: run only what is running")
      .def_rw("retry_at_ns", &optim::BatchDecision::retry_at_ns,
              "engine-clock time when admitting is worth another look (0: next step)");
}

}  // namespace optimate::python
