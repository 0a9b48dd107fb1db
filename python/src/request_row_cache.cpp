#include "request_row_cache.h"

#include <vector>

#include <nanobind/stl/string.h>

namespace optimate::python {

void RequestRowCache::fill_waiting(OwnedSchedulerView& view, nb::handle requests, nb::handle make_row) {
  std::vector<const RequestRow*> rows;
  // Another object's row under an id a new row takes: erased once the view has copied the rows,
  // or when make_row throws partway (its id points to the new object already).
  std::vector<PyObject*> stale;
  struct EraseStale {
    std::vector<PyObject*>& stale;
    RequestRowCache& cache;
    ~EraseStale() {
      for (PyObject* object : stale) cache.by_object_.erase(object);
    }
  } erase_stale{stale, *this};
  rows.reserve(nb::len(requests));
  for (nb::handle request : requests) {
    auto it = by_object_.find(request.ptr());
    if (it == by_object_.end()) {
      RequestRow row = parse_row(make_row(request), "waiting", rows.size());
      PyObject*& holder = by_id_[row.request_id];
      if (holder != nullptr) stale.push_back(holder);
      holder = request.ptr();
      it = by_object_.emplace(request.ptr(), Entry{nb::borrow(request), std::move(row)}).first;
    }
    rows.push_back(&it->second.row);  // unordered_map: an element stays where it is
  }
  view.set_waiting(rows);
}

void RequestRowCache::drop(const std::string& request_id) {
  auto id = by_id_.find(request_id);
  if (id == by_id_.end()) return;
  by_object_.erase(id->second);
  by_id_.erase(id);
}

void RequestRowCache::clear() {
  by_id_.clear();
  by_object_.clear();
}

namespace {

// The cache holds its requests: the garbage collector sees them, so a cycle through it is found.
int traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  for (const auto& [object, entry] : nb::inst_ptr<RequestRowCache>(self)->entries()) Py_VISIT(object);
  return 0;
}

int clear(PyObject* self) {
  nb::inst_ptr<RequestRowCache>(self)->clear();
  return 0;
}

PyType_Slot slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(traverse)},
                       {Py_tp_clear, reinterpret_cast<void*>(clear)},
                       {0, nullptr}};

}  // namespace

void bind_request_row_cache(nb::module_& m) {
  nb::class_<RequestRowCache>(m, "RequestRowCache",
                              "A front end's waiting rows kept between decisions, keyed by its request objects: "
                              "a row is made once, then reused until dropped.",
                              nb::type_slots(slots))
      .def(nb::init<>())
      .def("fill_waiting", &RequestRowCache::fill_waiting, nb::arg("view"), nb::arg("requests"), nb::arg("make_row"),
           "Sets view.waiting to the rows of `requests`, in order: a cached row, or make_row(request) (a "
           "tuple as SchedulerView.set_queues takes it), cached.")
      .def("drop", &RequestRowCache::drop, nb::arg("request_id"),
           "Forgets the request's row (it is made again when next needed).")
      .def("__len__", &RequestRowCache::size);
}

}  // namespace optimate::python
