// Queue and batch policies written in Python, run by the C++ scheduler between steps.
//
// The scheduler calls these from whichever thread steps the engine (the caller of step(), or
// the AsyncEngine's thread) with the GIL released; each call takes the GIL, copies the
// scheduler's view (policy_views.h: the C++ view types themselves), calls the Python method and
// converts what it returns. A Python exception or an answer of the wrong type is thrown as an
// Error, so the policy guard (engine/policy_guard.h) treats it as it treats a C++ policy's: that
// call gets the baseline's decision, the step goes on, and between steps the engine disables the
// optimizer. The Python exception itself is kept in PolicyFailures, for the engine's owner to
// report (a warning after the step, or sys.unraisablehook for an async engine).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nanobind/nanobind.h>

#include "optim/api/policy_set.h"

namespace optimate::python {

namespace nb = nanobind;

// A Python object owned from C++ code that may run without the GIL: the reference is dropped
// under the GIL (or leaked if the interpreter is already gone).
class PyRef {
 public:
  explicit PyRef(nb::object object) : object_(std::move(object)) {}
  ~PyRef();
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  const nb::object& get() const { return object_; }

 private:
  nb::object object_;
};

// The first Python policy failure since the last take(); touched only with the GIL held.
class PolicyFailures {
 public:
  // Async engines have no step() caller to raise to: failures go to sys.unraisablehook
  // (printed with their traceback) instead of being kept.
  explicit PolicyFailures(bool report_unraisable) : report_unraisable_(report_unraisable) {}
  ~PolicyFailures();
  void record(const std::string& message, nb::handle exception);
  // (message, exception or None), or None.
  nb::object take();

 private:
  bool report_unraisable_;
  std::optional<std::string> message_;
  nb::object exception_;
};

enum class PythonPolicyKind { kQueue, kBatch };

// A policy set holding `object` in its slot, reporting under `name`.
optim::PolicySet make_python_policy_set(const std::string& name, PythonPolicyKind kind,
                                        std::shared_ptr<PyRef> object,
                                        std::shared_ptr<PolicyFailures> failures);

}  // namespace optimate::python
