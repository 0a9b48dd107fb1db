// The C++ policy views (optim/api/views.h) as Python classes: the same structs, bound field by
// field, so a policy written in Python reads exactly what a C++ policy reads.
//
// optim::SchedulerView refers to its requests through spans and each request to its id through a
// string_view; OwnedSchedulerView is that view plus the storage those point into, so Python may
// keep it after the call, and Python code (the vLLM plugin, tests) may build one.
#pragma once

#include <deque>
#include <span>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>

#include "optim/api/views.h"

// An EnginePriority is a Python int (in the engine's order, larger is more important).
namespace nanobind::detail {
template <>
struct type_caster<optimate::EnginePriority> {
  NB_TYPE_CASTER(optimate::EnginePriority, const_name("int"))
  bool from_python(handle src, uint8_t flags, cleanup_list* cleanup) noexcept {
    make_caster<int64_t> c;
    if (!c.from_python(src, flags, cleanup)) return false;
    value = optimate::EnginePriority{c.value};
    return true;
  }
  static handle from_cpp(optimate::EnginePriority p, rv_policy, cleanup_list*) noexcept {
    return PyLong_FromLongLong(p.value);
  }
};
}  // namespace nanobind::detail

// A SchedulerView's queues are bound lists (RequestViewList) whose items refer into the view, not
// copies made by the STL caster.
NB_MAKE_OPAQUE(std::vector<optimate::optim::RequestView>)

namespace optimate::python {

namespace nb = nanobind;

// One request row as Python hands it to OwnedSchedulerView (every field of optim::RequestView
// but the id, which the view stores).
struct RequestRow {
  std::string request_id;
  optim::RequestView fields;
};

class OwnedSchedulerView : public optim::SchedulerView {
 public:
  OwnedSchedulerView() { point_spans(); }
  // A copy of `view` and of every request and id it refers to.
  explicit OwnedSchedulerView(const optim::SchedulerView& view);
  OwnedSchedulerView(const OwnedSchedulerView&) = delete;
  OwnedSchedulerView& operator=(const OwnedSchedulerView&) = delete;

  // Replaces the queues (their ids are copied into the view's storage).
  void set_queues(const std::vector<RequestRow>& waiting, const std::vector<RequestRow>& running);
  // Replaces the running queue alone: a front end whose waiting queue did not change keeps it.
  void set_running(const std::vector<RequestRow>& running);
  // Replaces the waiting queue alone, from rows held elsewhere (RequestRowCache).
  void set_waiting(std::span<const RequestRow* const> waiting);
  // The view with its spans on the queues as they are now (Python may have changed the lists).
  const optim::SchedulerView& refreshed() {
    point_spans();
    return *this;
  }

  std::vector<optim::RequestView> waiting_items;
  std::vector<optim::RequestView> running_items;

 private:
  static std::vector<optim::RequestView> copy_requests(std::span<const optim::RequestView> from,
                                                       std::deque<std::string>& ids);
  static void fill(std::span<const RequestRow* const> rows, std::vector<optim::RequestView>& into,
                   std::deque<std::string>& ids);
  void point_spans();

  // Each queue's ids; deques: appending never moves the ids the views point into.
  std::deque<std::string> waiting_ids_;
  std::deque<std::string> running_ids_;
};

// A front end's metadata mapping ({"priority": p, ...}, or None) as the engine's record: the
// priority converted from the clients' `order`, every other key set through RequestMetadata's
// binding. Error(kInvalidArgument) names an unknown key or a value of the wrong type.
RequestMetadata request_metadata_from(nb::handle mapping, PriorityOrder order);

// One row as set_queues takes it (a tuple: request_id, then REQUEST_ROW_FIELDS in order);
// Error(kInvalidArgument) names `queue`[`index`] when it is not one.
RequestRow parse_row(nb::handle item, const char* queue, size_t index);

// RequestView, KvView, KvQuota, PolicyKnobs, SchedulerView, ClassMetrics, WindowMetrics,
// MetricsView, KvPrecision and BatchDecision.
void bind_policy_views(nb::module_& m);

}  // namespace optimate::python
