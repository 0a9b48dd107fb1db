// Applying a step's sampled tokens, and ending sequences (stop, length, abort).
#include <algorithm>

#include "core/error.h"
#include "sched/scheduler.h"

namespace optimate::sched {

RequestOutput Scheduler::make_output(const Request& r) const {
  RequestOutput out;
  out.request_id = r.request_id;
  out.index = r.seq_index;
  out.usage.prompt_tokens = r.num_prompt_tokens;
  // A token still pending (its step in flight) has not reached the client, and may never.
  out.usage.completion_tokens = r.num_output_tokens() - (r.token_pending() ? 1 : 0);
  out.usage.cached_tokens = r.num_cached_tokens;
  if (r.first_admitted_ns >= 0) out.queue_ns = r.first_admitted_ns - r.arrival_ns;
  return out;
}

void Scheduler::release(Request& r, FinishReason reason) {
  const SeqId seq = r.seq_id;
  if (r.status == RequestStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), seq));
  } else if (r.status == RequestStatus::kWaiting) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq));
  }
  kv_.free(seq);
  auto g = groups_.find(r.request_id);
  OPTIMATE_CHECK(g != groups_.end(), "sequence {} has no request", seq);
  if (--g->second.num_unfinished == 0) groups_.erase(g);
  requests_.erase(seq);
}

void Scheduler::observe_step(const StepPlan& plan, int64_t step_ns) {
  if (step_ns > 0) {
    double& mean = stats_.mean_step_ns;
    mean = mean > 0.0 ? 0.9 * mean + 0.1 * static_cast<double>(step_ns) : static_cast<double>(step_ns);
  }
  // Steps of many tokens are bound by their compute, so their time per token is what a
  // recomputed prefix costs; a step of a few decodes is bound by reading the weights.
  const int64_t min_tokens = std::clamp<int64_t>(config_.max_num_batched_tokens / 2, 1, 256);
  if (plan.num_tokens < min_tokens || step_ns <= 0) return;
  const double ns_per_token = static_cast<double>(step_ns) / static_cast<double>(plan.num_tokens);
  double& rate = stats_.prefill_ns_per_token;
  rate = rate > 0.0 ? 0.8 * rate + 0.2 * ns_per_token : ns_per_token;
}

void Scheduler::advance(const StepPlan& plan) {
  for (const ScheduledSeq& s : plan.seqs) {
    auto it = requests_.find(s.seq_id);
    if (it == requests_.end()) continue;  // ended after the step was planned
    Request& r = *it->second;
    OPTIMATE_CHECK(r.status == RequestStatus::kRunning && r.num_computed_tokens == s.start_pos && !r.token_pending(),
                   "sequence {} changed between schedule and advance", s.seq_id);
    const int64_t num_new = static_cast<int64_t>(s.token_ids.size());
    stats_.num_prompt_tokens_computed +=
        std::clamp<int64_t>(r.num_prompt_tokens - r.num_computed_tokens, 0, num_new);
    r.num_computed_tokens += num_new;
    if (r.preempted_ns >= 0 && r.num_computed_tokens >= r.resume_at_tokens) {
      stats_.preempted_ns += clock_.now_ns() - r.preempted_ns;
      r.preempted_ns = -1;
    }
    if (s.want_logits) {
      r.token_ids.push_back(kPendingToken);
    }
  }
}

std::vector<RequestOutput> Scheduler::resolve(const StepPlan& plan, const StepResult& result) {
  if (!plan.empty()) {
    const int64_t now = clock_.now_ns();
    last_step_ns_ = now - std::max(plan.scheduled_ns, last_resolve_ns_);
    last_resolve_ns_ = now;
    observe_step(plan, last_step_ns_);
  }
  std::vector<RequestOutput> outputs;
  size_t k = 0;
  for (const ScheduledSeq& s : plan.seqs) {
    const SampledToken* token = nullptr;
    if (s.want_logits) {
      OPTIMATE_CHECK(k < result.tokens.size(), "step result has {} tokens, plan wants more",
                     result.tokens.size());
      token = &result.tokens[k++];
    }
    auto it = requests_.find(s.seq_id);
    if (it == requests_.end()) continue;
    Request& r = *it->second;
    const int64_t end = s.start_pos + static_cast<int64_t>(s.token_ids.size());
    if (token) {
      // The step's token is the sequence's last: advance() put its placeholder there, and the
      // next step's advance() comes only after this resolve().
      OPTIMATE_CHECK(r.token_pending() && r.num_tokens() == end + 1, "sequence {} has no pending token at {}",
                     s.seq_id, end);
      r.token_ids.back() = token->token_id;
      ++stats_.num_generated_tokens;
    }
    // A sequence preempted since (KV dropped or swapped out) registers nothing.
    if (r.status == RequestStatus::kRunning) kv_.commit(r.seq_id, r.token_ids, std::min(end, r.num_computed_tokens));
    if (!token) continue;

    RequestOutput out = make_output(r);
    out.new_token_ids.push_back(token->token_id);
    if (token->logprobs) out.logprobs.push_back(*token->logprobs);
    const StopDecision stop = check_stop(r, config_.eos_token_ids, config_.max_model_len);
    if (stop.reason != FinishReason::kNone) {
      out.finished = true;
      out.finish_reason = stop.reason;
      out.stop_reason = stop.stop_reason;
      release(r, stop.reason);
    }
    outputs.push_back(std::move(out));
  }
  OPTIMATE_CHECK(k == result.tokens.size(), "step result has {} tokens, plan wanted {}",
                 result.tokens.size(), k);
  return outputs;
}

void Scheduler::finish_sequence(const std::string& request_id, int64_t index, FinishReason reason,
                                std::variant<std::monostate, int64_t, std::string> stop_reason) {
  auto g = groups_.find(request_id);
  if (g == groups_.end() || index < 0 || index >= static_cast<int64_t>(g->second.seqs.size()))
    return;
  auto it = requests_.find(g->second.seqs[index]);
  if (it != requests_.end()) release(*it->second, reason);
}

std::vector<RequestOutput> Scheduler::abort(const std::string& request_id) {
  std::vector<RequestOutput> outputs;
  auto g = groups_.find(request_id);
  if (g == groups_.end()) return outputs;
  const std::vector<SeqId> seqs = g->second.seqs;  // release() may erase the group
  for (SeqId seq : seqs) {
    auto it = requests_.find(seq);
    if (it == requests_.end()) continue;
    RequestOutput out = make_output(*it->second);
    out.finished = true;
    out.finish_reason = FinishReason::kAbort;
    release(*it->second, FinishReason::kAbort);
    outputs.push_back(std::move(out));
  }
  return outputs;
}

}  // namespace optimate::sched
