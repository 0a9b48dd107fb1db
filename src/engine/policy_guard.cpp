#include "engine/policy_guard.h"

#include <algorithm>
#include <exception>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/logging.h"

namespace optimate {

std::string_view fallback_reason_name(FallbackReason reason) {
  switch (reason) {
    case FallbackReason::kError: return "error";
    case FallbackReason::kStepFailure: return "step_failure";
    case FallbackReason::kWatchdog: return "watchdog";
    case FallbackReason::kThroughput: return "throughput";
    case FallbackReason::kController: return "controller";
    case FallbackReason::kKernelFault: return "kernel_fault";
  }
  return "error";
}

namespace {

using namespace optim;

// Times one call and turns a throw or an invalid answer into a fault plus the fallback's answer.
class Guard {
 public:
  Guard(std::shared_ptr<OptimizerHealth> health, std::shared_ptr<GuardContext> context)
      : health_(std::move(health)), context_(std::move(context)) {}

  // `call` runs the policy; `valid` checks its answer (an empty string when fine); `fallback`
  // answers instead after a fault (absent for a baseline: the error propagates).
  template <typename Call, typename Valid, typename Fallback>
  auto run(std::string_view what, Call&& call, Valid&& valid, Fallback&& fallback, bool has_fallback) {
    if (health_->fault && has_fallback) return fallback();
    context_->last_called = health_;
    const int64_t start = context_->clock->now_ns();
    try {
      auto out = call();
      account(start);
      if (const std::string problem = valid(out); !problem.empty()) {
        if (!has_fallback) return out;  // the scheduler's own checks report a baseline's
        fault(FallbackReason::kError, fmt::format("{} {}", what, problem));
        return fallback();
      }
      return out;
    } catch (const std::exception& e) {
      account(start);
      if (!has_fallback) throw;
      fault(FallbackReason::kError, fmt::format("{} threw: {}", what, e.what()));
      return fallback();
    }
  }

  OptimizerHealth& health() { return *health_; }
  GuardContext& context() { return *context_; }

  void record(DecisionRecord record) const {
    if (!context_->decisions) return;
    record.t_s = context_->engine_clock ? context_->engine_clock->now_s() : 0.0;
    if (record.optimizer.empty()) record.optimizer = health_->optimizer;
    context_->decisions->write(record);
  }

 private:
  void account(int64_t start_ns) {
    const int64_t elapsed = context_->clock->now_ns() - start_ns;
    health_->seconds_total += static_cast<double>(elapsed) * 1e-9;
    ++health_->num_calls;
    const double limit_ms = context_->watchdog_ms;
    if (limit_ms <= 0 || static_cast<double>(elapsed) * 1e-6 <= limit_ms) {
      health_->slow_calls_in_a_row = 0;
      return;
    }
    if (++health_->slow_calls_in_a_row >= context_->watchdog_calls && !health_->baseline)
      fault(FallbackReason::kWatchdog,
            fmt::format("{} calls in a row took over {} ms (the last {:.1f} ms)", health_->slow_calls_in_a_row,
                        limit_ms, static_cast<double>(elapsed) * 1e-6));
  }

  void fault(FallbackReason reason, std::string detail) {
    if (health_->fault) return;
    spdlog::error("optimizer '{}': {}; the baseline takes over", health_->optimizer, detail);
    health_->fault = PolicyFault{reason, std::move(detail)};
  }

  std::shared_ptr<OptimizerHealth> health_;
  std::shared_ptr<GuardContext> context_;
};

std::string index_problem(int64_t index, size_t size, const char* of) {
  if (index >= 0 && index < static_cast<int64_t>(size)) return {};
  return fmt::format("chose {}[{}] of {}", of, index, size);
}

// Priorities as the clients sent them.
void add_request_fields(DecisionRecord& r, const RequestView& v, int64_t now_ns, const char* prefix,
                        PriorityOrder priority_order) {
  const std::string p(prefix);
  r.with(p + "request_id", std::string(v.request_id))
      .with(p + "priority", to_client_priority(priority_order, v.metadata.priority).value)
      .with(p + "waited_ms", static_cast<double>(now_ns - v.arrival_ns) * 1e-6);
}

class GuardedQueue final : public QueuePolicy {
 public:
  GuardedQueue(std::shared_ptr<QueuePolicy> inner, std::shared_ptr<QueuePolicy> fallback, Guard guard)
      : inner_(std::move(inner)), fallback_(std::move(fallback)), guard_(std::move(guard)) {}
  std::string_view name() const override { return inner_->name(); }
  std::vector<PolicyCounter> counters() const override { return inner_->counters(); }

  std::vector<int64_t> order_waiting(const SchedulerView& view) override {
    return guard_.run(
        "order_waiting", [&] { return inner_->order_waiting(view); },
        [&](const std::vector<int64_t>& order) -> std::string {
          std::vector<bool> seen(view.waiting.size(), false);
          for (int64_t i : order) {
            if (std::string p = index_problem(i, view.waiting.size(), "waiting"); !p.empty()) return p;
            if (seen[static_cast<size_t>(i)]) return fmt::format("chose waiting[{}] twice", i);
            seen[static_cast<size_t>(i)] = true;
          }
          return {};
        },
        [&] { return fallback_->order_waiting(view); }, fallback_ != nullptr);
  }

  std::optional<int64_t> preempt_for(const SchedulerView& view, int64_t waiting_index,
                                     BlockedOn blocked_on) override {
    const std::optional<int64_t> victim = guard_.run(
        "preempt_for", [&] { return inner_->preempt_for(view, waiting_index, blocked_on); },
        [&](const std::optional<int64_t>& v) {
          return v ? index_problem(*v, view.running.size(), "running") : std::string();
        },
        [&] { return fallback_->preempt_for(view, waiting_index, blocked_on); }, fallback_ != nullptr);
    if (victim && *victim >= 0 && *victim < static_cast<int64_t>(view.running.size())) {
      DecisionRecord r;
      r.event = "preemption";
      r.reason = blocked_on == BlockedOn::kKvBlocks ? "kv_blocks" : "max_num_seqs";
      add_request_fields(r, view.running[static_cast<size_t>(*victim)], view.now_ns, "", guard_.context().priority_order);
      r.with("num_blocks", view.running[static_cast<size_t>(*victim)].num_blocks)
          .with("num_output_tokens", view.running[static_cast<size_t>(*victim)].num_output_tokens);
      add_request_fields(r, view.waiting[static_cast<size_t>(waiting_index)], view.now_ns, "for_", guard_.context().priority_order);
      r.with("kv_usage", view.kv.usage()).with("num_running", static_cast<int64_t>(view.running.size()));
      guard_.record(std::move(r));
    }
    return victim;
  }

 private:
  std::shared_ptr<QueuePolicy> inner_, fallback_;
  Guard guard_;
};

class GuardedBatch final : public BatchPolicy {
 public:
  GuardedBatch(std::shared_ptr<BatchPolicy> inner, std::shared_ptr<BatchPolicy> fallback, Guard guard)
      : inner_(std::move(inner)), fallback_(std::move(fallback)), guard_(std::move(guard)) {}
  std::string_view name() const override { return inner_->name(); }
  std::vector<PolicyCounter> counters() const override { return inner_->counters(); }

  BatchDecision decide(const SchedulerView& view) override {
    const BatchDecision d = guard_.run(
        "decide", [&] { return inner_->decide(view); }, [](const BatchDecision&) { return std::string(); },
        [&] { return fallback_->decide(view); }, fallback_ != nullptr);
    // One record per hold, when it starts.
    if (!d.admit_waiting && !holding_ && !view.waiting.empty()) {
      DecisionRecord r;
      r.event = "batch_hold";
      r.reason = "waiting for a fuller batch";
      r.with("num_waiting", static_cast<int64_t>(view.waiting.size()))
          .with("num_running", static_cast<int64_t>(view.running.size()))
          .with("hold_ms", d.retry_at_ns > 0 ? static_cast<double>(d.retry_at_ns - view.now_ns) * 1e-6 : 0.0);
      if (view.knobs.batch_max_wait_ms) r.with("max_wait_ms", *view.knobs.batch_max_wait_ms);
      for (const PolicyCounter& c : inner_->counters())
        if (c.name == "arrival_rate_per_s" || c.name == "step_ms") r.figures.emplace_back(c.name, c.value);
      guard_.record(std::move(r));
    }
    holding_ = !d.admit_waiting;
    return d;
  }

 private:
  std::shared_ptr<BatchPolicy> inner_, fallback_;
  Guard guard_;
  bool holding_ = false;
};

class GuardedPreempt final : public PreemptPolicy {
 public:
  GuardedPreempt(std::shared_ptr<PreemptPolicy> inner, std::shared_ptr<PreemptPolicy> fallback, Guard guard)
      : inner_(std::move(inner)), fallback_(std::move(fallback)), guard_(std::move(guard)) {}
  std::string_view name() const override { return inner_->name(); }
  std::vector<PolicyCounter> counters() const override { return inner_->counters(); }

  PreemptDecision choose_victim(const SchedulerView& view, std::span<const int64_t> candidates) override {
    const PreemptDecision d = guard_.run(
        "choose_victim", [&] { return inner_->choose_victim(view, candidates); },
        [&](const PreemptDecision& d) -> std::string {
          if (std::find(candidates.begin(), candidates.end(), d.running_index) != candidates.end()) return {};
          return fmt::format("chose running[{}], not a candidate", d.running_index);
        },
        [&] { return fallback_->choose_victim(view, candidates); }, fallback_ != nullptr);
    if (d.running_index >= 0 && d.running_index < static_cast<int64_t>(view.running.size())) {
      const RequestView& v = view.running[static_cast<size_t>(d.running_index)];
      DecisionRecord r;
      r.event = "preemption";
      r.reason = "kv_exhausted";
      add_request_fields(r, v, view.now_ns, "", guard_.context().priority_order);
      r.with("num_blocks", v.num_blocks)
          .with("num_output_tokens", v.num_output_tokens)
          .with("num_candidates", static_cast<int64_t>(candidates.size()))
          .with("kv_usage", view.kv.usage())
          .with("num_running", static_cast<int64_t>(view.running.size()));
      guard_.record(std::move(r));
    }
    return d;
  }

 private:
  std::shared_ptr<PreemptPolicy> inner_, fallback_;
  Guard guard_;
};

class GuardedKv final : public KvPolicy {
 public:
  GuardedKv(std::shared_ptr<KvPolicy> inner, std::shared_ptr<KvPolicy> fallback, Guard guard)
      : inner_(std::move(inner)), fallback_(std::move(fallback)), guard_(std::move(guard)) {}
  std::string_view name() const override { return inner_->name(); }
  std::vector<PolicyCounter> counters() const override { return inner_->counters(); }

  kv::KvPrecision precision_for(const SchedulerView& view, const RequestView& request) override {
    return guard_.run(
        "precision_for", [&] { return inner_->precision_for(view, request); },
        [](kv::KvPrecision) { return std::string(); }, [&] { return fallback_->precision_for(view, request); },
        fallback_ != nullptr);
  }
  std::vector<RequantizeOrder> requantize(const SchedulerView& view) override {
    return guard_.run(
        "requantize", [&] { return inner_->requantize(view); },
        [](const std::vector<RequantizeOrder>&) { return std::string(); },
        [&] { return fallback_->requantize(view); }, fallback_ != nullptr);
  }
  std::optional<Footprint> admission_footprint(const SchedulerView& view) override {
    return guard_.run(
        "admission_footprint", [&] { return inner_->admission_footprint(view); },
        [](const std::optional<Footprint>& f) -> std::string {
          return f && f->max_blocks < 0 ? fmt::format("asked for a footprint of {} blocks", f->max_blocks) : "";
        },
        [&] { return fallback_->admission_footprint(view); }, fallback_ != nullptr);
  }

 private:
  std::shared_ptr<KvPolicy> inner_, fallback_;
  Guard guard_;
};

class GuardedKernels final : public KernelPolicy {
 public:
  GuardedKernels(std::shared_ptr<KernelPolicy> inner, std::shared_ptr<KernelPolicy> fallback, Guard guard)
      : inner_(std::move(inner)), fallback_(std::move(fallback)), guard_(std::move(guard)) {}
  std::string_view name() const override { return inner_->name(); }
  std::vector<PolicyCounter> counters() const override { return inner_->counters(); }
  KernelChoice choose(std::span<const KernelFamily> families) override {
    return guard_.run(
        "choose", [&] { return inner_->choose(families); },
        [&](const KernelChoice& choice) -> std::string {
          for (const auto& [family, variant] : choice) {
            auto f = std::find_if(families.begin(), families.end(), [&](const KernelFamily& k) { return k.name == family; });
            if (f == families.end()) return fmt::format("chose kernel family '{}', which this runner has not", family);
            if (std::find(f->variants.begin(), f->variants.end(), variant) == f->variants.end())
              return fmt::format("chose variant '{}' of kernel family '{}', which this runner has not", variant, family);
          }
          return {};
        },
        [&] { return fallback_->choose(families); }, fallback_ != nullptr);
  }

 private:
  std::shared_ptr<KernelPolicy> inner_, fallback_;
  Guard guard_;
};

// A controller's fallback is no controller: no change.
class GuardedController final : public Controller {
 public:
  GuardedController(std::shared_ptr<Controller> inner, Guard guard)
      : inner_(std::move(inner)), guard_(std::move(guard)) {}
  std::string_view name() const override { return inner_->name(); }
  std::vector<PolicyCounter> counters() const override { return inner_->counters(); }
  double interval_ms() const override { return inner_->interval_ms(); }
  double window_ms() const override { return inner_->window_ms(); }
  KnobChanges tick(const MetricsView& metrics, const Knobs& knobs) override {
    return guard_.run(
        "tick", [&] { return inner_->tick(metrics, knobs); }, [](const KnobChanges&) { return std::string(); },
        [] { return KnobChanges{}; }, true);
  }

 private:
  std::shared_ptr<Controller> inner_;
  Guard guard_;
};

// The guard of each slot's policy type.
template <typename P> struct GuardOf;
template <> struct GuardOf<QueuePolicy> { using type = GuardedQueue; };
template <> struct GuardOf<BatchPolicy> { using type = GuardedBatch; };
template <> struct GuardOf<PreemptPolicy> { using type = GuardedPreempt; };
template <> struct GuardOf<KvPolicy> { using type = GuardedKv; };
template <> struct GuardOf<KernelPolicy> { using type = GuardedKernels; };

template <typename P>
std::shared_ptr<P> wrap(const std::shared_ptr<P>& inner, const std::shared_ptr<P>& fallback, const Guard& guard) {
  if (!inner) return nullptr;
  return std::make_shared<typename GuardOf<P>::type>(inner, fallback, guard);
}

std::shared_ptr<Controller> wrap(const std::shared_ptr<Controller>& inner, const std::shared_ptr<Controller>&,
                                 const Guard& guard) {
  if (!inner) return nullptr;
  return std::make_shared<GuardedController>(inner, guard);
}

}  // namespace

optim::PolicySet guard_policies(const optim::PolicySet& set, const std::shared_ptr<OptimizerHealth>& health,
                                const optim::PolicySet* fallback, const std::shared_ptr<GuardContext>& context) {
  const Guard guard(health, context);
  const optim::PolicySet none;
  const optim::PolicySet& fb = fallback ? *fallback : none;
  optim::PolicySet out;
  optim::visit_slots([&](PolicySlot, auto& o, const auto& in, const auto& f) { o = wrap(in, f, guard); }, out, set, fb);
  return out;
}

}  // namespace optimate
