#include "python_policies.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

#include "core/error.h"
#include "policy_views.h"

namespace optimate::python {
namespace {

// "RuntimeError: policy bug": the exception's type and message, without the traceback.
std::string exception_summary(nb::python_error& e) {
  return fmt::format("{}: {}", nb::cast<std::string>(e.type().attr("__name__")),
                     nb::cast<std::string>(nb::str(e.value())));
}

nb::object to_python(const optim::SchedulerView& view) {
  return nb::cast(new OwnedSchedulerView(view), nb::rv_policy::take_ownership);
}

// What every Python policy shares: the object, its name, failure reporting, counters.
class PythonPolicy {
 public:
  PythonPolicy(std::string name, std::shared_ptr<PyRef> object, std::shared_ptr<PolicyFailures> failures)
      : name_(std::move(name)), object_(std::move(object)), failures_(std::move(failures)) {}

 protected:
  const nb::object& object() const { return object_->get(); }
  // Records the failure for the engine's owner and throws it to the policy guard.
  [[noreturn]] void fail_call(const char* method, const std::string& why, nb::handle exception = nb::none()) const {
    std::string message = fmt::format("Python policy '{}': {} {}", name_, method, why);
    failures_->record(message, exception);
    throw Error(ErrorCode::kInvalidArgument, message);
  }
  [[noreturn]] void raised(const char* method, nb::python_error& e) const {
    fail_call(method, "raised " + exception_summary(e), e.value());
  }
  std::vector<optim::PolicyCounter> python_counters() const {
    nb::gil_scoped_acquire gil;
    std::vector<optim::PolicyCounter> out;
    try {
      nb::object counters = object().attr("counters")();
      for (auto [key, value] : nb::cast<nb::dict>(counters))
        out.push_back({nb::cast<std::string>(key), nb::cast<double>(value)});
    } catch (nb::python_error& e) {
      failures_->record(fmt::format("Python policy '{}': counters() raised {}", name_, exception_summary(e)),
                        e.value());
    } catch (const nb::cast_error&) {
      failures_->record(fmt::format("Python policy '{}': counters() did not return a dict of str to float", name_),
                        nb::none());
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
    std::vector<int64_t> order;
    try {
      order = nb::cast<std::vector<int64_t>>(object().attr("order_waiting")(to_python(view)));
    } catch (nb::python_error& e) {
      raised("order_waiting()", e);
    } catch (const nb::cast_error&) {
      fail_call("order_waiting()", "did not return a list of int");
    }
    // The guard rejects such an order too; checked here so the user hears why.
    std::vector<bool> seen(view.waiting.size(), false);
    for (int64_t i : order) {
      if (i < 0 || i >= static_cast<int64_t>(seen.size()) || seen[static_cast<size_t>(i)])
        fail_call("order_waiting()", fmt::format("returned a bad or repeated index {} (of {} waiting)", i, seen.size()));
      seen[static_cast<size_t>(i)] = true;
    }
    return order;
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
      if (victim < 0 || victim >= static_cast<int64_t>(view.running.size()))
        fail_call("preempt_for()", fmt::format("chose running[{}] of {}", victim, view.running.size()));
      return victim;
    } catch (nb::python_error& e) {
      raised("preempt_for()", e);
    } catch (const nb::cast_error&) {
      fail_call("preempt_for()", "did not return an int or None");
    }
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
      raised("decide()", e);
    } catch (const nb::cast_error&) {
      fail_call("decide()", "did not return a bool or a BatchDecision");
    }
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

}  // namespace optimate::python
