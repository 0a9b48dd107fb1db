// One engine step, by one of two step functions chosen when async_scheduling is set (as vLLM
// v1 picks step or step_with_batch_queue once): the synchronous one runs each step alone; the
// overlapped one plans and launches step N+1, then applies step N while N+1 runs. An
// overlapped engine still runs a step alone when it cannot overlap (a row for the host
// sampler, a step timed by stage, a watched kernel variant); once the runner refuses a launch
// the engine is synchronous for good.
#include <algorithm>
#include <unordered_map>

#include "core/error.h"
#include "engine/engine.h"

namespace optimate {
namespace {

constexpr int64_t kIdleRetryNs = 1'000'000;

}  // namespace

void Engine::choose_step_fn() {
  // Between steps only. A step left in flight when overlap turns off is collected by the
  // synchronous step that comes next.
  step_fn_ = config_.async_scheduling && runner_launches_ ? &Engine::step_overlapped : &Engine::step_sync;
}

std::vector<RequestOutput> Engine::step() {
  const int64_t entry_ns = clock_->now_ns();
  if (last_step_end_ns_) profiler_->add_phase("between", entry_ns - *last_step_end_ns_);
  last_step_end_ns_.reset();
  std::vector<RequestOutput> out = std::move(pending_);  // aborts
  pending_.clear();
  if (window_) for (const RequestOutput& o : out) window_->on_output(o, entry_ns);
  take_faults();
  tick_controller();
  // The step's own time (the controller's window, the throughput guard) starts after the tick.
  const int64_t start_ns = clock_->now_ns();
  profiler_->add_phase("observe", start_ns - entry_ns);
  phase_mark_ns_ = start_ns;
  // From a step that ran and left work to do until the next step(): the serving loop's time.
  if ((this->*step_fn_)(start_ns, out) && has_unfinished()) last_step_end_ns_ = phase_mark_ns_;
  return out;
}

bool Engine::step_sync(int64_t start_ns, std::vector<RequestOutput>& out) {
  const bool timed = profiler_->wants_stages();
  if (in_flight_) finish_in_flight(out);  // launched before async_scheduling turned off
  PlannedStep step;
  if (!plan_step(timed, step, out)) return false;
  run_alone(step, start_ns, out);
  return true;
}

bool Engine::step_overlapped(int64_t start_ns, std::vector<RequestOutput>& out) {
  // A step that cannot overlap the one in flight waits for it first, and is planned on its tokens.
  // Decided once: finishing the step in flight counts a step, which moves wants_stages().
  const bool timed = profiler_->wants_stages();
  // A watched kernel variant runs its steps one at a time, so a bad one can run again.
  const bool overlap = host_sampled_.empty() && !timed && !kernels_->watching();
  if (in_flight_ && !overlap) finish_in_flight(out);
  PlannedStep step;
  if (!plan_step(timed, step, out)) return false;
  if (!overlap || !launch_overlapped(step.plan, step.batch)) {
    run_alone(step, start_ns, out);
    return true;
  }
  phase("forward");
  // This step runs on the device while the host applies the one before it.
  if (in_flight_) finish_in_flight(out);
  const char* kind = step_kind(step.batch);
  const int64_t prompt_tokens = advance(step.plan);
  in_flight_ = LaunchedStep{std::move(step.plan), kind, step.estimated_s, start_ns, prompt_tokens};
  // Nothing left to plan (the step's rows all ended meanwhile): collect it now rather than
  // leave it for a step() that may come much later.
  if (!scheduler_->has_unfinished()) finish_in_flight(out);
  phase("update");
  return true;
}

bool Engine::plan_step(bool timed, PlannedStep& step, std::vector<RequestOutput>& out) {
  const int64_t schedule_ns = clock_->now_ns();
  sched::StepPlan& plan = step.plan;
  plan = schedule_guarded();
  if (decisions_) {
    record_admissions(plan, schedule_ns);
    if (!plan.requantize.empty()) record_requantize(plan);
  }
  runner_->requantize(plan.requantize);
  runner_->copy_kv(plan.copies);  // a step may copy blocks and run nothing (a swap-in)
  idle_until_ns_.reset();
  if (plan.empty()) {
    phase("schedule");
    if (in_flight_) finish_in_flight(out);
    // Nothing ran: without a retry time from the batch policy, look again after a short
    // pause rather than spin.
    if (scheduler_->has_unfinished() && plan.copies.empty())
      idle_until_ns_ = plan.retry_at_ns > 0 ? plan.retry_at_ns : clock_->now_ns() + kIdleRetryNs;
    return false;
  }
  step.batch.seqs.reserve(plan.seqs.size());
  for (const auto& s : plan.seqs)
    step.batch.seqs.push_back({s.token_ids, s.start_pos, s.block_ids, s.want_logits, s.all_logits});
  step.estimated_s = step_estimator_ ? step_estimator_(step.batch) : 0.0;
  if (timed) runner_->time_next_step_by_stage();
  phase("schedule");
  return true;
}

void Engine::run_alone(PlannedStep& step, int64_t start_ns, std::vector<RequestOutput>& out) {
  // Only a step that overlaps may be planned with one in flight (it takes that step's tokens):
  // a row for the host sampler comes from a request in host_sampled_, which stops overlap first.
  OPTIMATE_CHECK(!in_flight_, "a step that runs alone was planned while one is in flight");
  sched::StepResult result;
  run_step(step.plan, step.batch, result);
  const char* kind = step_kind(step.batch);
  const int64_t prompt_tokens = advance(step.plan);
  finish_step({std::move(step.plan), kind, step.estimated_s, start_ns, prompt_tokens}, result, std::nullopt, out);
}

bool Engine::launch_overlapped(sched::StepPlan& plan, const ForwardBatch& batch) {
  if (!device_specs(plan)) return false;
  // A pending token is the in-flight step's draw for that sequence: name its row there.
  std::unordered_map<sched::SeqId, int64_t> rows;
  for (sched::ScheduledSeq& s : plan.seqs)
    for (int32_t& t : s.token_ids) {
      if (t != sched::kPendingToken) continue;
      OPTIMATE_CHECK(in_flight_.has_value(), "sequence {} has a pending token and no step is in flight", s.seq_id);
      if (rows.empty()) {
        int64_t k = 0;
        for (const sched::ScheduledSeq& f : in_flight_->plan.seqs)
          if (f.want_logits) rows.emplace(f.seq_id, k++);
      }
      auto it = rows.find(s.seq_id);
      OPTIMATE_CHECK(it != rows.end(), "sequence {} has a pending token the step in flight does not draw",
                     s.seq_id);
      t = token_from_last_launch(it->second);
    }
  if (runner_->launch_sample(batch, specs_)) return true;
  // The runner cannot launch ahead (and never will); it launched nothing before either.
  OPTIMATE_CHECK(!in_flight_, "the runner refused a launch after launching the step in flight");
  runner_launches_ = false;
  choose_step_fn();
  return false;
}

int64_t Engine::advance(const sched::StepPlan& plan) {
  const int64_t before = scheduler_->stats().num_prompt_tokens_computed;
  scheduler_->advance(plan);
  return scheduler_->stats().num_prompt_tokens_computed - before;
}

void Engine::finish_in_flight(std::vector<RequestOutput>& out) {
  const LaunchedStep step = std::move(*in_flight_);
  in_flight_.reset();
  runner_->collect_sample(device_tokens_);
  const int64_t end_ns = clock_->now_ns();
  phase("forward");  // the host waiting for the device
  sched::StepResult result;
  take_device_tokens(result);
  finish_step(step, result, end_ns, out);
}

void Engine::finish_step(const LaunchedStep& step, const sched::StepResult& result, std::optional<int64_t> end_ns,
                         std::vector<RequestOutput>& out) {
  const size_t first = out.size();
  for (RequestOutput& o : scheduler_->resolve(step.plan, result)) {
    process_output(o);
    out.push_back(std::move(o));
  }
  phase("update");
  // The step ran on the device from when the one before it was collected, at the earliest.
  const int64_t start_ns = std::max(step.start_ns, last_collect_ns_);
  last_collect_ns_ = end_ns.value_or(clock_->now_ns());
  observe_step({.kind = step.kind,
                .start_ns = start_ns,
                .end_ns = last_collect_ns_,
                .estimated_s = step.estimated_s,
                .prompt_tokens = step.prompt_tokens,
                .outputs = std::span<const RequestOutput>(out).subspan(first),
                .device = runner_->last_step_device_times(device_times_) ? &device_times_ : nullptr});
  phase("observe");
}

}  // namespace optimate
