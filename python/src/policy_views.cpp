#include "policy_views.h"

#include <nanobind/operators.h>
#include <nanobind/stl/bind_vector.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

#include "core/error.h"
#include "optim/api/policies.h"

namespace optimate::python {
namespace {

std::vector<const RequestRow*> pointers(const std::vector<RequestRow>& rows) {
  std::vector<const RequestRow*> out;
  out.reserve(rows.size());
  for (const RequestRow& row : rows) out.push_back(&row);
  return out;
}

}  // namespace

OwnedSchedulerView::OwnedSchedulerView(const optim::SchedulerView& view) : optim::SchedulerView(view) {
  waiting_items = copy_requests(view.waiting, waiting_ids_);
  running_items = copy_requests(view.running, running_ids_);
  point_spans();
}

std::vector<optim::RequestView> OwnedSchedulerView::copy_requests(std::span<const optim::RequestView> from,
                                                                  std::deque<std::string>& ids) {
  std::vector<optim::RequestView> out(from.begin(), from.end());
  for (optim::RequestView& r : out) r.request_id = ids.emplace_back(r.request_id);
  return out;
}

void OwnedSchedulerView::fill(std::span<const RequestRow* const> rows, std::vector<optim::RequestView>& into,
                              std::deque<std::string>& ids) {
  ids.clear();
  into.clear();
  into.reserve(rows.size());
  for (const RequestRow* row : rows) {
    optim::RequestView& r = into.emplace_back(row->fields);
    r.request_id = ids.emplace_back(row->request_id);
  }
}

void OwnedSchedulerView::set_queues(const std::vector<RequestRow>& waiting, const std::vector<RequestRow>& running) {
  fill(pointers(waiting), waiting_items, waiting_ids_);
  fill(pointers(running), running_items, running_ids_);
  point_spans();
}

void OwnedSchedulerView::set_running(const std::vector<RequestRow>& running) {
  fill(pointers(running), running_items, running_ids_);
  point_spans();
}

void OwnedSchedulerView::set_waiting(std::span<const RequestRow* const> waiting) {
  fill(waiting, waiting_items, waiting_ids_);
  point_spans();
}

void OwnedSchedulerView::point_spans() {
  waiting = waiting_items;
  running = running_items;
}

RequestMetadata request_metadata_from(nb::handle mapping, PriorityOrder order) {
  RequestMetadata metadata;
  if (mapping.is_none()) return metadata;
  if (!nb::isinstance<nb::dict>(mapping))
    fail(ErrorCode::kInvalidArgument, "metadata must be a dict, got {}", nb::type_name(mapping.type()).c_str());
  nb::object record = nb::cast(&metadata, nb::rv_policy::reference);
  for (auto [key, value] : nb::borrow<nb::dict>(mapping)) {
    const std::string name = nb::cast<std::string>(nb::str(key));
    if (name == "priority") {  // the client's convention: converted here, once
      if (!nb::isinstance<nb::int_>(value) || nb::isinstance<nb::bool_>(value))
        fail(ErrorCode::kInvalidArgument, "priority must be an int, got {}",
             nb::type_name(value.type()).c_str());
      int64_t client = 0;
      if (!nb::try_cast(value, client))
        fail(ErrorCode::kInvalidArgument, "priority must fit in 64 bits, got {}",
             nb::cast<std::string>(nb::str(value)));
      metadata.priority = to_engine_priority(order, ClientPriority{client});
      continue;
    }
    // Every other field a client may send is RequestMetadata's binding: its name and its type.
    if (name.starts_with("_") || !nb::hasattr(record, name.c_str())) {
      std::string known = "priority";
      for (nb::handle attr : nb::module_::import_("builtins").attr("dir")(record.type()))
        if (const std::string a = nb::cast<std::string>(attr); !a.starts_with("_") && a != "priority") known += ", " + a;
      fail(ErrorCode::kInvalidArgument, "metadata has an unknown key '{}' (known: {})", name, known);
    }
    try {
      nb::setattr(record, name.c_str(), value);
    } catch (const nb::python_error&) {
      fail(ErrorCode::kInvalidArgument, "metadata['{}'] has the wrong type ({})", name,
           nb::type_name(value.type()).c_str());
    }
  }
  return metadata;
}

namespace {

// The order of a request row's fields after the id (SchedulerView.set_queues).
constexpr const char* kRowFields[] = {"seq_id",          "seq_index",      "priority",
                                      "arrival_ns",      "num_prompt_tokens", "num_output_tokens",
                                      "num_computed_tokens", "max_tokens", "num_blocks",
                                      "num_full_blocks", "num_preemptions", "num_kv_bytes",
                                      "admitted_ns",     "scheduled_this_step"};
constexpr size_t kNumRowFields = std::size(kRowFields);

}  // namespace

RequestRow parse_row(nb::handle item, const char* queue, size_t index) {
  if (!nb::isinstance<nb::tuple>(item) || nb::len(item) != kNumRowFields + 1)
    fail(ErrorCode::kInvalidArgument, "{}[{}]: expected a tuple (request_id, {} more fields: see REQUEST_ROW_FIELDS)",
         queue, index, kNumRowFields);
  nb::tuple t = nb::borrow<nb::tuple>(item);
  RequestRow row;
  try {
    row.request_id = nb::cast<std::string>(t[0]);
    int64_t* ints[] = {&row.fields.seq_id,           &row.fields.seq_index,       &row.fields.metadata.priority.value,
                       &row.fields.arrival_ns,       &row.fields.num_prompt_tokens, &row.fields.num_output_tokens,
                       &row.fields.num_computed_tokens, &row.fields.max_tokens,   &row.fields.num_blocks,
                       &row.fields.num_full_blocks,  &row.fields.num_preemptions, &row.fields.num_kv_bytes,
                       &row.fields.admitted_ns};
    for (size_t f = 0; f < std::size(ints); ++f) *ints[f] = nb::cast<int64_t>(t[f + 1]);
    row.fields.scheduled_this_step = nb::cast<bool>(t[kNumRowFields]);
  } catch (const nb::cast_error&) {
    fail(ErrorCode::kInvalidArgument, "{}[{}]: request_id must be a str, then {} integers and a bool", queue, index,
         kNumRowFields - 1);
  }
  return row;
}

namespace {

std::vector<RequestRow> parse_rows(nb::handle rows, const char* queue) {
  std::vector<RequestRow> out;
  out.reserve(nb::len(rows));
  size_t index = 0;
  for (nb::handle item : rows) out.push_back(parse_row(item, queue, index++));
  return out;
}

std::string request_repr(const optim::RequestView& r) {
  return fmt::format("RequestView(request_id='{}', seq_index={}, priority={}, num_prompt_tokens={}, "
                     "num_output_tokens={}, num_computed_tokens={}, num_blocks={})",
                     r.request_id, r.seq_index, r.metadata.priority.value, r.num_prompt_tokens, r.num_output_tokens,
                     r.num_computed_tokens, r.num_blocks);
}

void bind_requests(nb::module_& m) {
  // The fields a client may send beyond its priority (which a front end converts), so a new
  // field of core/request_metadata.h is bound here once and the Python front end passes it on.
  nb::class_<RequestMetadata>(m, "RequestMetadata",
                              "What a client tells the scheduler about a request (core/request_metadata.h).")
      .def(nb::init<>())
      .def_rw("priority", &RequestMetadata::priority, "in the engine's order: larger is more important");
  using R = optim::RequestView;
  nb::class_<R>(m, "RequestView", "A sequence as a policy sees it (optim::RequestView).")
      .def_rw("seq_id", &R::seq_id, "the scheduler's id of this sequence (unique, never reused)")
      .def_prop_ro("request_id", [](const R& r) { return std::string(r.request_id); })
      .def_rw("seq_index", &R::seq_index, "which of the request's n samples")
      .def_rw("metadata", &R::metadata, "what the client sent (RequestMetadata)")
      .def_prop_rw(
          "priority", [](const R& r) { return r.metadata.priority; },
          [](R& r, EnginePriority p) { r.metadata.priority = p; }, "in the engine's order: larger is more important")
      .def_rw("arrival_ns", &R::arrival_ns, "engine clock")
      .def_rw("num_prompt_tokens", &R::num_prompt_tokens)
      .def_rw("num_output_tokens", &R::num_output_tokens)
      .def_rw("num_computed_tokens", &R::num_computed_tokens)
      .def_rw("max_tokens", &R::max_tokens)
      .def_rw("num_blocks", &R::num_blocks, "KV blocks held now")
      .def_rw("num_full_blocks", &R::num_full_blocks, "of those, at full precision")
      .def_rw("num_preemptions", &R::num_preemptions)
      .def_rw("num_kv_bytes", &R::num_kv_bytes, "bytes of KV its computed tokens hold (what a swap copies)")
      .def_rw("admitted_ns", &R::admitted_ns, "when it last entered the running set (-1: never)")
      .def_rw("scheduled_this_step", &R::scheduled_this_step)
      .def("__repr__", &request_repr);
  nb::bind_vector<std::vector<R>, nb::rv_policy::reference_internal>(m, "RequestViewList",
                                                                      "A queue of RequestView (a list).");
  nb::list fields;
  fields.append("request_id");
  for (const char* f : kRowFields) fields.append(f);
  m.attr("REQUEST_ROW_FIELDS") = nb::tuple(fields);
}

void bind_kv(nb::module_& m) {
  nb::enum_<kv::KvPrecision>(m, "KvPrecision", "Precision of stored KV values.")
      .value("F32", kv::KvPrecision::kF32)
      .value("BF16", kv::KvPrecision::kBF16)
      .value("FP8", kv::KvPrecision::kFP8)
      .value("INT8", kv::KvPrecision::kInt8)
      .value("INT4", kv::KvPrecision::kInt4);
  using K = optim::KvView;
  nb::class_<K>(m, "KvView", "The KV block pool as a policy sees it (optim::KvView).")
      .def(nb::init<>())
      .def_rw("num_blocks", &K::num_blocks, "blocks of the default precision the empty cache holds")
      .def_rw("num_free_blocks", &K::num_free_blocks, "of the default precision, allocatable now")
      .def_rw("block_size", &K::block_size)
      .def_rw("default_precision", &K::default_precision)
      .def_rw("used", &K::used, "share of the cache's bytes held by sequences (0..1)")
      .def("usage", &K::usage, "share of the cache in use, in [0, 1]")
      .def_rw("num_host_blocks", &K::num_host_blocks, "the host swap region's blocks (0: no swap space)")
      .def_rw("num_host_free_blocks", &K::num_host_free_blocks)
      .def_rw("host_link_bytes_per_s", &K::host_link_bytes_per_s, "0: unknown")
      .def_rw("prefix_caching", &K::prefix_caching)
      .def_rw("admits_whole_prompt", &K::admits_whole_prompt,
              "admitting a request takes blocks for its whole uncomputed prompt (else its first chunk)")
      .def_rw("watermark_blocks", &K::watermark_blocks, "blocks admission leaves free while others run");
  using Q = optim::KvQuota;
  nb::class_<Q>(m, "KvQuota", "How much of the KV pool each priority class may take (optim::KvQuota).")
      .def(nb::init<>())
      .def_rw("reserve_blocks", &Q::reserve_blocks)
      .def_rw("reserve_min_priority", &Q::reserve_min_priority)
      .def_rw("long_max_share", &Q::long_max_share)
      .def_rw("long_min_tokens", &Q::long_min_tokens)
      .def_rw("footprint_blocks", &Q::footprint_blocks,
              "the most blocks the running sequences may hold once a request below footprint_min_priority "
              "is admitted, each counted as one whatever its precision (0: no limit)")
      .def_rw("footprint_min_priority", &Q::footprint_min_priority)
      .def("active", &Q::active)
      .def(nb::self == nb::self);
  using P = optim::PolicyKnobs;
  nb::class_<P>(m, "PolicyKnobs", "Settings a controller moves and policies read (optim::PolicyKnobs).")
      .def(nb::init<>())
      .def_rw("kv_quota", &P::kv_quota)
      .def_rw("batch_max_wait_ms", &P::batch_max_wait_ms, "None: the batch policy's own max_wait_ms")
      .def_rw("kv_quant_precision", &P::kv_quant_precision, "None: the KV policy's own choice")
      .def(nb::self == nb::self);
}

void bind_scheduler_view(nb::module_& m) {
  using S = optim::SchedulerView;
  using O = OwnedSchedulerView;
  nb::class_<O>(m, "SchedulerView",
                "The scheduler's queues at one decision (optim::SchedulerView, a copy Python may keep).")
      .def(nb::init<>())
      .def_rw("now_ns", &S::now_ns, "engine clock")
      .def_ro("waiting", &O::waiting_items, "RequestViewList: in the mechanism's order (preempted first, then arrival)")
      .def_ro("running", &O::running_items, "RequestViewList: in admission order")
      .def(
          "set_queues",
          [](O& v, nb::handle waiting, nb::handle running) {
            v.set_queues(parse_rows(waiting, "waiting"), parse_rows(running, "running"));
          },
          nb::arg("waiting"), nb::arg("running"),
          "Replaces the queues: each a list of tuples (request_id, then REQUEST_ROW_FIELDS in order).")
      .def(
          "set_running", [](O& v, nb::handle running) { v.set_running(parse_rows(running, "running")); },
          nb::arg("running"), "Replaces the running queue alone, rows as in set_queues; the waiting queue stays.")
      .def_rw("kv", &S::kv)
      .def_rw("max_num_seqs", &S::max_num_seqs)
      .def_rw("max_num_batched_tokens", &S::max_num_batched_tokens)
      .def_rw("token_budget_left", &S::token_budget_left)
      .def_rw("last_step_ns", &S::last_step_ns, "duration of the last step that ran (0 before the first)")
      .def_rw("prefill_ns_per_token", &S::prefill_ns_per_token, "what recomputing a token costs (0: unknown)")
      .def_rw("mean_step_ns", &S::mean_step_ns, "moving average of the steps' times")
      .def_rw("knobs", &S::knobs);
}

void bind_metrics_views(nb::module_& m) {
  using C = optim::ClassMetrics;
  nb::class_<C>(m, "ClassMetrics", "One priority class (optim::ClassMetrics).")
      .def(nb::init<>())
      .def_rw("priority", &C::priority)
      .def_rw("num_running", &C::num_running)
      .def_rw("num_waiting", &C::num_waiting)
      .def_rw("kv_blocks", &C::kv_blocks)
      .def_rw("long_kv_blocks", &C::long_kv_blocks);
  using W = optim::WindowMetrics;
  nb::class_<W>(m, "WindowMetrics", "Figures over the controller's window (optim::WindowMetrics).")
      .def(nb::init<>())
      .def_rw("window_ms", &W::window_ms)
      .def_rw("num_arrivals", &W::num_arrivals)
      .def_rw("arrival_rate_per_s", &W::arrival_rate_per_s)
      .def_rw("num_ttft_samples", &W::num_ttft_samples)
      .def_rw("ttft_p50_ms", &W::ttft_p50_ms)
      .def_rw("ttft_p99_ms", &W::ttft_p99_ms)
      .def_rw("num_tpot_samples", &W::num_tpot_samples)
      .def_rw("tpot_p50_ms", &W::tpot_p50_ms)
      .def_rw("tpot_p99_ms", &W::tpot_p99_ms)
      .def_rw("num_steps", &W::num_steps)
      .def_rw("step_ms_mean", &W::step_ms_mean)
      .def_rw("step_ms_p99", &W::step_ms_p99)
      .def_rw("busy_fraction", &W::busy_fraction)
      .def_rw("generated_tokens_per_s", &W::generated_tokens_per_s)
      .def_rw("prompt_tokens_per_s", &W::prompt_tokens_per_s);
  using M = optim::MetricsView;
  nb::class_<M>(m, "MetricsView", "Engine-wide figures a controller reads (optim::MetricsView).")
      .def(nb::init<>())
      .def_rw("now_ns", &M::now_ns)
      .def_rw("num_running", &M::num_running)
      .def_rw("num_waiting", &M::num_waiting)
      .def_rw("kv_usage", &M::kv_usage)
      .def_rw("num_steps", &M::num_steps)
      .def_rw("num_preemptions", &M::num_preemptions)
      .def_rw("num_generated_tokens", &M::num_generated_tokens)
      .def_rw("num_prompt_tokens", &M::num_prompt_tokens)
      .def_rw("last_step_num_tokens", &M::last_step_num_tokens)
      .def_rw("num_kv_blocks", &M::num_kv_blocks)
      .def_rw("oldest_waiting_ms", &M::oldest_waiting_ms)
      .def_rw("classes", &M::classes, "list[ClassMetrics], most important first")
      .def_rw("window", &M::window);
}

}  // namespace

void bind_policy_views(nb::module_& m) {
  bind_requests(m);
  bind_kv(m);
  bind_scheduler_view(m);
  bind_metrics_views(m);
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
