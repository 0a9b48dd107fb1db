#include "sched/scheduler.h"

#include <algorithm>
#include <unordered_set>

#include "core/error.h"
#include "core/logging.h"

namespace optimate::sched {

Scheduler::Scheduler(SchedulerConfig config, optim::PolicySet policies, const Clock& clock)
    : config_(std::move(config)),
      policies_(optim::with_baselines(std::move(policies))),
      preempt_mode_(std::make_shared<optim::CostPreemptModePolicy>(config_.preemption_mode)),
      clock_(clock),
      kv_((config_.validate(), config_.kv_layout), config_.num_kv_blocks, config_.block_size,
          config_.enable_prefix_caching, config_.host_slots, config_.kv_free_order) {}

void Scheduler::set_policies(optim::PolicySet policies) {
  policies_ = optim::with_baselines(std::move(policies));
}

void Scheduler::set_limits(int64_t max_num_seqs, int64_t max_num_batched_tokens) {
  SchedulerConfig next = config_;
  next.max_num_seqs = max_num_seqs;
  next.max_num_batched_tokens = max_num_batched_tokens;
  next.validate();
  config_ = next;
}

void Scheduler::add_request(const std::string& request_id, std::vector<int32_t> prompt_ids,
                            std::shared_ptr<const SamplingParams> params,
                            const RequestMetadata& metadata, uint64_t seed) {
  if (groups_.count(request_id))
    fail(ErrorCode::kInvalidArgument, "request id '{}' is already in use", request_id);
  if (prompt_ids.empty())
    fail(ErrorCode::kInvalidArgument, "request '{}' has an empty prompt", request_id);
  const int64_t prompt_len = static_cast<int64_t>(prompt_ids.size());
  if (prompt_len >= config_.max_model_len)
    fail(ErrorCode::kInvalidArgument,
         "This model's maximum context length is {} tokens. However, you requested {} tokens "
         "in the prompt of request '{}'", config_.max_model_len, prompt_len, request_id);
  params->validate();
  Group& group = groups_[request_id];
  const int64_t arrival_ns = metadata.arrival_ns.value_or(clock_.now_ns());
  for (int64_t i = 0; i < params->n; ++i) {
    auto r = std::make_unique<Request>();
    r->seq_id = next_seq_id_++;
    r->request_id = request_id;
    r->seq_index = i;
    r->params = params;
    r->metadata = metadata;
    r->arrival_ns = arrival_ns;
    r->seed = seed + static_cast<uint64_t>(i);
    r->token_ids = prompt_ids;
    r->num_prompt_tokens = prompt_len;
    if (i > 0) r->fork_parent = group.seqs.front();
    group.seqs.push_back(r->seq_id);
    waiting_.push_back(r->seq_id);
    requests_.emplace(r->seq_id, std::move(r));
  }
  group.num_unfinished = params->n;
}

const Request* Scheduler::find(SeqId seq) const {
  auto it = requests_.find(seq);
  return it == requests_.end() ? nullptr : it->second.get();
}

optim::RequestView Scheduler::view_of(const Request& r, bool scheduled) const {
  optim::RequestView v;
  v.seq_id = r.seq_id;
  v.request_id = r.request_id;
  v.seq_index = r.seq_index;
  v.metadata = r.metadata;
  v.arrival_ns = r.arrival_ns;
  v.num_prompt_tokens = r.num_prompt_tokens;
  v.num_output_tokens = r.num_output_tokens();
  v.num_computed_tokens = r.num_computed_tokens;
  v.max_tokens = r.params->max_tokens;
  const auto blocks = kv_.block_ids(r.seq_id);
  v.num_blocks = static_cast<int64_t>(blocks.size());
  v.num_full_blocks = std::count_if(blocks.begin(), blocks.end(), [](int32_t e) { return kv::entry_code(e) == 0; });
  v.num_preemptions = r.num_preemptions;
  v.num_kv_bytes = kv_.num_slots_for_tokens(r.seq_id, r.num_computed_tokens) * config_.kv_bytes_per_slot;
  v.admitted_ns = r.last_admitted_ns;
  v.scheduled_this_step = scheduled;
  return v;
}

optim::SchedulerView Scheduler::make_view(const std::vector<Pending>& pending, int64_t budget) {
  std::unordered_set<SeqId> scheduled;
  for (const Pending& p : pending) scheduled.insert(p.seq);
  waiting_views_.clear();
  running_views_.clear();
  for (SeqId s : waiting_) waiting_views_.push_back(view_of(*requests_.at(s), false));
  for (SeqId s : running_) running_views_.push_back(view_of(*requests_.at(s), scheduled.count(s) != 0));
  optim::SchedulerView view;
  view.now_ns = clock_.now_ns();
  view.waiting = waiting_views_;
  view.running = running_views_;
  view.kv = {kv_.pool().num_blocks(), kv_.pool().num_free_blocks(), kv_.block_size(),
             config_.kv_layout.base, kv_.pool().usage()};
  view.kv.prefix_caching = config_.enable_prefix_caching;
  view.kv.finest_precision = config_.kv_layout.finest;
  view.kv.admits_whole_prompt = true;
  view.kv.watermark_blocks = watermark_blocks();
  for (const auto& [precision, blocks] : kv_.pool().live_blocks())
    view.kv.used_blocks_by_code[kv::precision_code(precision)] += blocks;
  if (kv_.host().has_swap()) {
    view.kv.num_host_blocks = kv_.host().num_swap_blocks();
    view.kv.num_host_free_blocks = kv_.host().num_free_swap_blocks();
    view.kv.host_link_bytes_per_s = config_.host_link_bytes_per_s;
  }
  view.prefill_ns_per_token = stats_.prefill_ns_per_token;
  view.mean_step_ns = stats_.mean_step_ns;
  view.max_num_seqs = config_.max_num_seqs;
  view.max_num_batched_tokens = config_.max_num_batched_tokens;
  view.token_budget_left = budget;
  view.last_step_ns = last_step_ns_;
  view.knobs = knobs_;
  return view;
}

kv::KvPrecision Scheduler::precision_for(const Request& r, const optim::SchedulerView& view) {
  const kv::KvPrecision p = policies_.kv->precision_for(view, view_of(r, false));
  if (!config_.kv_layout.holds(p))
    fail(ErrorCode::kInvalidArgument, "KV policy '{}' asked for {} blocks, which this KV cache does not "
         "hold (restart with the optimizer configured so the cache is laid out for it)",
         policies_.kv->name(), kv::kv_precision_name(p));
  return p;
}

optim::PreemptModeChoice Scheduler::preempt_mode(const optim::SchedulerView& view, int64_t running_index,
                                                 std::optional<optim::PreemptMode> asked) {
  if (asked) return {*asked, "policy", "the victim policy's demand"};
  return preempt_mode_->choose_mode(view, view.running[running_index]);
}

void Scheduler::preempt(SeqId seq, const optim::PreemptModeChoice& choice, std::vector<Pending>& pending,
                        int64_t& budget) {
  Request& r = *requests_.at(seq);
  auto it = std::find_if(pending.begin(), pending.end(), [&](const Pending& p) { return p.seq == seq; });
  if (it != pending.end()) {
    budget += it->num_new;
    pending.erase(it);
  }
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  std::string_view reason = choice.reason;
  bool swapped = false;
  if (choice.mode == optim::PreemptMode::kSwap) {
    if (r.num_computed_tokens == 0) reason = "nothing_computed";
    else if (kv_.swap_out(seq, r.num_computed_tokens)) swapped = true;
    else reason = "host_full";
  }
  if (r.preempted_ns < 0) {
    r.preempted_ns = clock_.now_ns();
    r.resume_at_tokens = r.num_computed_tokens;
  }
  if (!swapped) {
    kv_.free(seq);
    r.num_computed_tokens = 0;
  }
  r.status = RequestStatus::kWaiting;
  ++r.num_preemptions;
  ++stats_.num_preemptions;
  const char* mode = optim::preempt_mode_name(swapped ? optim::PreemptMode::kSwap : optim::PreemptMode::kRecompute);
  ++stats_.preemptions_by_mode[mode][std::string(reason)];
  // Back to the front: a preempted sequence resumes before anything that arrived after it.
  waiting_.push_front(seq);
  spdlog::debug("preempted sequence {} of request '{}' ({} tokens computed): {} ({}: {})", seq, r.request_id,
                r.resume_at_tokens, mode, reason, choice.detail);
}

sampling::SampleRow Scheduler::sample_row(const Request& r) const {
  sampling::SampleRow row;
  row.params = r.params;
  row.seed = r.seed;
  row.output_index = r.num_output_tokens();
  row.suppressed_ids = sampling::suppressed_ids(*r.params, r.num_output_tokens(), config_.eos_token_ids);
  if (sampling::needs_token_history(*r.params)) {
    row.prompt_ids.assign(r.token_ids.begin(), r.token_ids.begin() + r.num_prompt_tokens);
    row.output_ids.assign(r.token_ids.begin() + r.num_prompt_tokens, r.token_ids.end());
  }
  return row;
}

namespace {
// Rows of prompt logits one step may hold (a row is a vocabulary of floats on the host).
constexpr int64_t kMaxPromptLogitsRows = 512;
}  // namespace

bool Scheduler::wants_prompt_logits(const Request& r) const {
  // The first sample reports them; its siblings share its prompt.
  return r.params->prompt_logprobs && r.seq_index == 0 && r.num_computed_tokens + 1 < r.num_prompt_tokens;
}

int64_t Scheduler::cap_for_prompt_logits(const Request& r, int64_t num_new) const {
  return wants_prompt_logits(r) ? std::min(num_new, prompt_logits_left_) : num_new;
}

void Scheduler::requantize(const optim::SchedulerView& view, StepPlan& plan) {
  if (!config_.kv_layout.dynamic()) return;
  const int64_t bs = kv_.block_size();
  for (const optim::RequantizeOrder& o : policies_.kv->requantize(view)) {
    auto it = requests_.find(o.seq_id);
    if (it == requests_.end() || it->second->status != RequestStatus::kRunning) continue;
    const Request& r = *it->second;
    const auto blocks = kv_.block_ids(r.seq_id);
    // Only blocks whose every token is computed (no write will touch them again), at full
    // precision and held by this sequence alone; others in the order are skipped.
    const int64_t last = std::min<int64_t>({o.first_block + o.num_blocks, r.num_computed_tokens / bs,
                                            static_cast<int64_t>(blocks.size())});
    int64_t left = o.max_blocks;
    for (int64_t b = std::max<int64_t>(0, o.first_block); b < last && left > 0; ++b) {
      const int32_t e = kv_.block_ids(r.seq_id)[b];
      if (kv::entry_code(e) != 0 || kv_.pool().ref_count(e) != 1) continue;
      plan.requantize.push_back(kv_.requantize(r.seq_id, b, o.precision));
      --left;
    }
  }
  if (!plan.requantize.empty())
    spdlog::debug("KV policy '{}': {} blocks requantized, cache {:.1f}% used", policies_.kv->name(),
                  plan.requantize.size(), 100.0 * kv_.pool().usage());
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  plan.scheduled_ns = clock_.now_ns();
  std::vector<Pending> pending;
  int64_t budget = config_.max_num_batched_tokens;
  prompt_logits_left_ = kMaxPromptLogitsRows;
  requantize(make_view(pending, budget), plan);
  const optim::SchedulerView start_view = make_view(pending, budget);

  // 1. Running sequences: decodes and unfinished prefill chunks.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request& r = *requests_.at(running_[i]);
    if (r.token_pending() && ends_by_length(r, config_.max_model_len)) {  // its last step is still running
      ++i;
      continue;
    }
    const int64_t num_new = cap_for_prompt_logits(r, std::min(r.num_tokens() - r.num_computed_tokens, budget));
    if (num_new == 0) {  // this step's prompt-logits rows are spent
      ++i;
      continue;
    }
    const kv::KvPrecision precision = precision_for(r, start_view);
    bool scheduled = false;
    while (true) {
      if (kv_.allocate(r.seq_id, r.num_computed_tokens, num_new, {}, precision)) {
        scheduled = true;
        break;
      }
      // Candidates: running sequences not yet part of this step, this one included.
      const optim::SchedulerView view = make_view(pending, budget);
      std::vector<int64_t> candidates;
      for (size_t j = i; j < running_.size(); ++j) candidates.push_back(static_cast<int64_t>(j));
      const optim::PreemptDecision d = policies_.preempt->choose_victim(view, candidates);
      if (std::find(candidates.begin(), candidates.end(), d.running_index) == candidates.end())
        fail(ErrorCode::kInternal, "preempt policy '{}' chose running[{}], not a candidate",
             policies_.preempt->name(), d.running_index);
      const SeqId victim = running_[d.running_index];
      plan.preempted.push_back(victim);
      preempt(victim, preempt_mode(view, d.running_index, d.mode), pending, budget);
      if (victim == r.seq_id) break;
    }
    // It gave its own blocks back; running_[i] is now the next sequence, which may fit.
    if (!scheduled) continue;
    if (wants_prompt_logits(r)) prompt_logits_left_ -= num_new;
    pending.push_back({r.seq_id, num_new});
    budget -= num_new;
    ++i;
  }

  // 2. Waiting sequences, unless this step had to preempt (the pool is full).
  if (plan.preempted.empty() && !waiting_.empty() && budget > 0)
    admit_waiting(pending, budget, plan);

  // Materialize the plan: block tables are final once every decision is taken.
  for (const Pending& p : pending) {
    const Request& r = *requests_.at(p.seq);
    ScheduledSeq s;
    s.seq_id = p.seq;
    s.start_pos = r.num_computed_tokens;
    s.token_ids.assign(r.token_ids.begin() + s.start_pos, r.token_ids.begin() + s.start_pos + p.num_new);
    auto blocks = kv_.block_ids(p.seq);
    s.block_ids.assign(blocks.begin(), blocks.end());
    s.want_logits = s.start_pos + p.num_new == r.num_tokens();
    if (s.want_logits) s.sample = sample_row(r);
    if (wants_prompt_logits(r)) {
      s.all_logits = true;
      s.prompt_targets.assign(r.token_ids.begin() + s.start_pos + 1,
                              r.token_ids.begin() + std::min(s.start_pos + p.num_new + 1, r.num_prompt_tokens));
    }
    plan.num_tokens += p.num_new;
    plan.seqs.push_back(std::move(s));
  }
  plan.copies = kv_.take_copies();
  ++stats_.num_steps;
  stats_.last_step_num_tokens = plan.num_tokens;
  return plan;
}

}  // namespace optimate::sched
