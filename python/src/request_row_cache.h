// A front end's waiting rows kept between decisions. A waiting request's row changes only when it
// is admitted or preempted, so a long waiting queue is converted once, not at every step: the
// cache keeps each request's parsed row, keyed by the front end's request object (held, so its
// address is not reused while the row is cached), until the front end drops it by request id.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>

#include <nanobind/nanobind.h>

#include "policy_views.h"

namespace optimate::python {

class RequestRowCache {
 public:
  // view.waiting = the rows of `requests` (an iterable of request objects), in its order: each
  // request's cached row, or make_row(request) (a tuple as SchedulerView.set_queues takes it),
  // parsed and cached. A row that is not one is an Error(kInvalidArgument) naming its index.
  void fill_waiting(OwnedSchedulerView& view, nb::handle requests, nb::handle make_row);
  // Forgets the row of the request with this id; nothing when it has none.
  void drop(const std::string& request_id);
  // Forgets every row (the garbage collector's clear).
  void clear();
  size_t size() const { return by_object_.size(); }

  struct Entry {
    nb::object request;
    RequestRow row;
  };
  const std::unordered_map<PyObject*, Entry>& entries() const { return by_object_; }

 private:
  std::unordered_map<PyObject*, Entry> by_object_;
  std::unordered_map<std::string, PyObject*> by_id_;
};

void bind_request_row_cache(nb::module_& m);

}  // namespace optimate::python
