// Continuous batching over the paged KV cache (the mechanism; every choice is a policy's).
//
// Each step, under a token budget (max_num_batched_tokens) and max_num_seqs:
//   1. running sequences first, in admission order: one decode token each, or the next chunk
//      of an unfinished prefill; when the pool runs dry the PreemptPolicy picks a victim and the
//      PreemptModePolicy how it gives its blocks back: dropped and recomputed on resume, or
//      swapped to the host tier and copied back (the sequence keeps its generated tokens, so
//      it continues exactly where it stopped either way; a swap that cannot happen recomputes);
//   2. then, if nothing was preempted and the BatchPolicy admits, waiting sequences in the
//      QueuePolicy's order, each starting after its longest cached prefix (device or host
//      tier), its prefill chunked to fit what is left of the budget. A swapped-out sequence is
//      copied back instead and runs from the next step, so the copy overlaps this one.
// The plan lists the copies between the tiers the step's bookkeeping decided; the runner
// applies them before the forward pass.
// update() (advance, then resolve) applies the sampled tokens, registers newly computed full
// blocks in the prefix cache, checks the token-level stop conditions and frees finished
// sequences at once. With one step in flight, a sequence whose last token is still pending
// and whose length already ends it is not scheduled again.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/clock.h"
#include "kv/kv_cache_manager.h"
#include "optim/api/policy_set.h"
#include "sched/scheduler_config.h"
#include "sched/scheduler_snapshot.h"
#include "sched/step_plan.h"
#include "sched/stop_checker.h"

namespace optimate::sched {

struct SchedulerStats {
  int64_t num_steps = 0;
  int64_t num_preemptions = 0;
  // By mode ("recompute", "swap") and reason (PreemptModeChoice::reason, or "host_full" and
  // "nothing_computed" when a swap fell back to recomputing).
  std::map<std::string, std::map<std::string, int64_t>> preemptions_by_mode;
  // Time preempted sequences spent until they had computed as many tokens as when preempted.
  int64_t preempted_ns = 0;
  double prefill_ns_per_token = 0.0;  // measured (0: no prefill step yet)
  double mean_step_ns = 0.0;          // moving average of the steps' times
  int64_t num_prompt_tokens_computed = 0;  // prefill work done (cached prefixes excluded)
  int64_t num_generated_tokens = 0;
  int64_t last_step_num_tokens = 0;
};

class Scheduler {
 public:
  // `policies` slots left empty run the baselines.
  Scheduler(SchedulerConfig config, optim::PolicySet policies, const Clock& clock);

  // Takes effect at the next schedule(); never call between schedule() and update().
  void set_policies(optim::PolicySet policies);
  const optim::PolicySet& policies() const { return policies_; }
  void set_limits(int64_t max_num_seqs, int64_t max_num_batched_tokens);
  const SchedulerConfig& config() const { return config_; }
  // Knobs the policies read from their view (a controller's); takes effect at the next schedule().
  void set_policy_knobs(const optim::PolicyKnobs& knobs) { knobs_ = knobs; }
  const optim::PolicyKnobs& policy_knobs() const { return knobs_; }

  // Queues params->n sequences of one request. Errors (kInvalidArgument): duplicate live id,
  // empty prompt, prompt not shorter than max_model_len.
  void add_request(const std::string& request_id, std::vector<int32_t> prompt_ids,
                   std::shared_ptr<const SamplingParams> params, const RequestMetadata& metadata,
                   uint64_t seed);
  StepPlan schedule();
  // A step in two halves, so that the next step can be planned while this one runs:
  // advance() once the step is launched (its positions count as computed, and each token it
  // samples is kPendingToken until known), resolve() once its tokens are known (they replace
  // the placeholders, stop conditions are checked, finished sequences are freed). Between
  // them, schedule() may plan the next step: a pending token is its input there. Sequences
  // that ended or were aborted in between are skipped.
  void advance(const StepPlan& plan);
  std::vector<RequestOutput> resolve(const StepPlan& plan, const StepResult& result);
  // Both halves at once: the synchronous step.
  std::vector<RequestOutput> update(const StepPlan& plan, const StepResult& result) {
    advance(plan);
    return resolve(plan, result);
  }
  // Ends a sequence now (the engine found a stop string) and frees its KV blocks.
  void finish_sequence(const std::string& request_id, int64_t index, FinishReason reason,
                       std::variant<std::monostate, int64_t, std::string> stop_reason);
  // Ends every unfinished sequence of the request; one finished output per sequence, empty
  // when the id is unknown or already finished.
  std::vector<RequestOutput> abort(const std::string& request_id);

  bool has_unfinished() const { return !requests_.empty(); }
  bool has_request(const std::string& request_id) const { return groups_.count(request_id) != 0; }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  const std::deque<SeqId>& waiting_queue() const { return waiting_; }
  const std::vector<SeqId>& running_queue() const { return running_; }
  const Request* find(SeqId seq) const;
  const kv::KvCacheManager& kv() const { return kv_; }
  // Forgets every cached prefix (both tiers); blocks held by a request stay with it, untouched.
  void reset_prefix_cache() { kv_.reset_prefix_cache(); }
  const SchedulerStats& stats() const { return stats_; }
  optim::MetricsView metrics() const;
  SchedulerSnapshot snapshot() const;

 private:
  struct Group {
    std::vector<SeqId> seqs;
    int64_t num_unfinished = 0;
  };
  struct Pending {  // an entry of the plan being built
    SeqId seq = 0;
    int64_t num_new = 0;
  };

  optim::RequestView view_of(const Request& r, bool scheduled) const;
  // Rebuilds views_ from the queues; `scheduled` marks sequences already in this step.
  optim::SchedulerView make_view(const std::vector<Pending>& pending, int64_t budget);
  kv::KvPrecision precision_for(const Request& r, const optim::SchedulerView& view);
  // Applies the KV policy's requantize orders (dynamic caches only) and lists them in the plan.
  void requantize(const optim::SchedulerView& view, StepPlan& plan);
  // How view.running[running_index] gives its blocks back: as `asked` (a victim policy's
  // demand), else as the PreemptModePolicy decides.
  optim::PreemptModeChoice preempt_mode(const optim::SchedulerView& view, int64_t running_index,
                                        std::optional<optim::PreemptMode> asked);
  // Takes `seq` out of the running set (and out of `pending`): its blocks swapped out, or
  // dropped when `choice` says recompute or the swap cannot happen.
  void preempt(SeqId seq, const optim::PreemptModeChoice& choice, std::vector<Pending>& pending,
               int64_t& budget);
  // After a step: measured prefill rate and preempted time.
  void observe_step(const StepPlan& plan, int64_t step_ns);
  bool try_admit(Request& r, int64_t budget, const optim::SchedulerView& view, int64_t& num_new);
  // Blocks a new request must leave free: kv_watermark of the pool while others run, else 0.
  int64_t watermark_blocks() const;
  // Whether blocks for num_tokens more tokens leave the pool its watermark.
  bool leaves_watermark(int64_t num_tokens, kv::KvPrecision precision) const;
  void admit_waiting(std::vector<Pending>& pending, int64_t& budget, StepPlan& plan);
  void release(Request& r, FinishReason reason);
  RequestOutput make_output(const Request& r) const;
  sampling::SampleRow sample_row(const Request& r) const;
  // Prompt logprobs: whether the sequence's next chunk needs a logits row per token, and the
  // most tokens it may then compute this step (the step's rows are bounded: each costs a
  // vocabulary of floats on the host).
  bool wants_prompt_logits(const Request& r) const;
  int64_t cap_for_prompt_logits(const Request& r, int64_t num_new) const;

  SchedulerConfig config_;
  optim::PolicySet policies_;
  optim::PolicyKnobs knobs_;
  std::shared_ptr<optim::PreemptModePolicy> preempt_mode_;
  const Clock& clock_;
  kv::KvCacheManager kv_;
  std::unordered_map<SeqId, std::unique_ptr<Request>> requests_;
  std::unordered_map<std::string, Group> groups_;
  std::deque<SeqId> waiting_;
  std::vector<SeqId> running_;
  SeqId next_seq_id_ = 0;
  SchedulerStats stats_;
  std::vector<optim::RequestView> waiting_views_;
  std::vector<optim::RequestView> running_views_;
  // The last step's time: from its schedule() (or the previous resolve(), when later: the step
  // waited for the one before it) to its resolve(): forward pass and sampling, no idling.
  int64_t last_resolve_ns_ = 0;
  int64_t last_step_ns_ = 0;
  int64_t prompt_logits_left_ = 0;  // logits rows prompt logprobs may still take this step
};

}  // namespace optimate::sched
