// What the engine notes of its steps: after each, its observers (the profiler, the controller's
// window, the throughput guard, whose fallback the engine then applies); when one is planned,
// admissions out of arrival order and requantized blocks for the decision log.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace optimate {

void Engine::list_observers() {
  observers_ = {profiler_.get()};
  if (window_) observers_.push_back(window_.get());
  if (throughput_) observers_.push_back(throughput_.get());
}

void Engine::observe_step(const StepRecord& step) {
  for (StepObserver* o : observers_) o->on_step(step);
  // A fallback changes the policies and so the list: it waits until every observer has seen the step.
  if (!throughput_) return;
  if (const std::optional<ThroughputFallback> f = throughput_->take_fallback())
    for (const std::string& name : f->optimizers) fall_back(name, FallbackReason::kThroughput, f->detail);
}

void Engine::record_admissions(const sched::StepPlan& plan, int64_t schedule_ns) {
  std::vector<const sched::Request*> admitted;
  for (const sched::ScheduledSeq& s : plan.seqs) {
    const sched::Request* r = scheduler_->find(s.seq_id);
    if (r && r->last_admitted_ns >= schedule_ns) admitted.push_back(r);
  }
  if (admitted.empty() || scheduler_->waiting_queue().empty()) return;
  // Requests still waiting, by arrival: an admission is out of order when one of them came first.
  std::vector<const sched::Request*> waiting;
  for (sched::SeqId seq : scheduler_->waiting_queue())
    if (const sched::Request* r = scheduler_->find(seq)) waiting.push_back(r);
  std::sort(waiting.begin(), waiting.end(),
            [](const sched::Request* a, const sched::Request* b) { return a->arrival_ns < b->arrival_ns; });
  // Shown as the clients sent them.
  const auto client = [&](EnginePriority p) { return to_client_priority(config_.priority_order, p).value; };
  for (const sched::Request* r : admitted) {
    const auto earlier = std::lower_bound(waiting.begin(), waiting.end(), r->arrival_ns,
                                          [](const sched::Request* w, int64_t t) { return w->arrival_ns < t; });
    const int64_t num_earlier = earlier - waiting.begin();
    if (num_earlier == 0) continue;
    const sched::Request* first = waiting.front();
    DecisionRecord d;
    d.event = "admission";
    d.optimizer = std::string(scheduler_->policies().queue->name());
    d.reason = r->metadata.priority > first->metadata.priority ? "higher priority than the earliest waiting request"
               : r->metadata.priority < first->metadata.priority
                   ? "lower priority admitted first: the earlier request's class is held back (starvation bound or KV quota)"
                   : "same priority: the earlier request does not fit yet (KV blocks, token budget) or a KV quota holds it";
    d.with("request_id", r->request_id)
        .with("priority", client(r->metadata.priority))
        .with("waited_ms", static_cast<double>(schedule_ns - r->arrival_ns) * 1e-6)
        .with("ahead_of", first->request_id)
        .with("ahead_of_priority", client(first->metadata.priority))
        .with("ahead_of_waited_ms", static_cast<double>(schedule_ns - first->arrival_ns) * 1e-6)
        .with("num_waiting_earlier", num_earlier)
        .with("preempted_before", r->num_preemptions);
    record(std::move(d));
  }
}

void Engine::record_requantize(const sched::StepPlan& plan) {
  const kv::KvLayout& layout = scheduler_->config().kv_layout;
  DecisionRecord d;
  d.event = "precision";
  d.optimizer = std::string(scheduler_->policies().kv->name());
  d.reason = "full-precision blocks requantized in place";
  d.with("num_blocks", static_cast<int64_t>(plan.requantize.size()))
      .with("to", std::string(kv::kv_precision_name(
                      scheduler_->policy_knobs().kv_quant_precision.value_or(layout.finest.value_or(layout.full)))))
      .with("kv_usage", scheduler_->kv().pool().usage());
  // The KV policy's own figures on the cache it leaves (kv_quant: the blocks it holds back and
  // the perplexity change its mix of precisions is estimated to cost).
  for (const optim::PolicyCounter& c : scheduler_->policies().kv->counters())
    if (c.name == "quality_estimate" || c.name == "held_for_priority") d.with(c.name, c.value);
  for (const auto& [precision, blocks] : scheduler_->kv().pool().live_blocks())
    d.with(std::string("blocks_") + kv::kv_precision_name(precision), blocks);
  record(std::move(d));
}

}  // namespace optimate
