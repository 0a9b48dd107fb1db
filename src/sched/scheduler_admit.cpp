// Admission of waiting sequences (step 2 of Scheduler::schedule).
#include <algorithm>

#include "core/error.h"
#include "sched/scheduler.h"

namespace optimate::sched {

int64_t Scheduler::watermark_blocks() const {
  return running_.empty() ? 0 : static_cast<int64_t>(config_.kv_watermark * static_cast<double>(kv_.pool().num_blocks()));
}

bool Scheduler::leaves_watermark(int64_t num_tokens, kv::KvPrecision precision) const {
  const int64_t watermark = watermark_blocks();
  if (watermark <= 0) return true;
  const int64_t blocks = (num_tokens + kv_.block_size() - 1) / kv_.block_size();
  return kv_.pool().num_free_blocks(precision) - blocks >= watermark;
}

bool Scheduler::try_admit(Request& r, int64_t budget, const optim::SchedulerView& view,
                          int64_t& num_new) {
  if (kv_.is_swapped(r.seq_id)) {
    // Its blocks come back by a copy this step; it computes from the next one on. Only with
    // room to spare, a block of growth for each running sequence and itself: taking the last
    // free blocks would preempt a sequence at the next step and send blocks back and forth.
    const int64_t blocks = (r.num_computed_tokens + kv_.block_size() - 1) / kv_.block_size();
    const int64_t headroom = running_.empty() ? 0 : static_cast<int64_t>(running_.size()) + 1;
    if (kv_.pool().num_free_blocks() < blocks + headroom) return false;
    num_new = 0;
    return kv_.swap_in(r.seq_id);
  }
  int64_t computed = 0;
  kv::PrefixHit hit;
  bool forked = false;
  if (r.fork_parent) {
    const Request* parent = find(*r.fork_parent);
    if (parent && parent->status == RequestStatus::kRunning &&
        parent->num_computed_tokens >= r.num_prompt_tokens) {
      // Share the sibling's full prompt blocks; the partial last block is recomputed.
      computed = kv_.fork(parent->seq_id, r.seq_id, r.num_prompt_tokens - 1);
      forked = true;
    }
  }
  const kv::KvPrecision precision = precision_for(r, view);
  // Prompt logprobs need every prompt token's logits: a cached prefix would skip them.
  if (!forked && !r.params->prompt_logprobs) {
    hit = kv_.find_cached_prefix(r.seq_id, r.token_ids, precision);
    computed = hit.num_tokens;
  }
  num_new = std::min(r.num_tokens() - computed, budget);
  if (wants_prompt_logits(r)) num_new = std::min(num_new, prompt_logits_left_);
  if (!leaves_watermark(r.num_tokens() - computed, precision)) {
    kv_.free(r.seq_id);
    return false;
  }
  if (!kv_.allocate(r.seq_id, computed, num_new, hit, precision)) {
    kv_.free(r.seq_id);
    return false;
  }
  if (!forked && kv_.pool().prefix_caching()) kv_.record_prefix_lookup(r.num_tokens(), hit);
  r.num_computed_tokens = computed;
  if (r.first_admitted_ns < 0) r.num_cached_tokens = computed;  // first admission only
  r.fork_parent.reset();
  return true;
}

void Scheduler::admit_waiting(std::vector<Pending>& pending, int64_t& budget, StepPlan& plan) {
  optim::SchedulerView view = make_view(pending, budget);
  if (const auto footprint = policies_.kv->admission_footprint(view)) {
    // The KV policy's limit joins a controller's: the tighter one, over the wider class.
    optim::KvQuota& q = view.knobs.kv_quota;
    const bool set = q.footprint_blocks > 0;
    q.footprint_blocks = set ? std::min(q.footprint_blocks, footprint->max_blocks) : footprint->max_blocks;
    q.footprint_min_priority = set ? std::max(q.footprint_min_priority, footprint->min_priority) : footprint->min_priority;
  }
  const optim::BatchDecision decision = policies_.batch->decide(view);
  if (!decision.admit_waiting) {
    plan.retry_at_ns = decision.retry_at_ns;
    return;
  }
  const std::vector<int64_t> order = policies_.queue->order_waiting(view);
  const std::vector<SeqId> snapshot(waiting_.begin(), waiting_.end());
  std::vector<bool> seen(snapshot.size(), false);
  for (int64_t idx : order) {
    if (idx < 0 || idx >= static_cast<int64_t>(snapshot.size()) || seen[idx])
      fail(ErrorCode::kInternal, "queue policy '{}' returned a bad or repeated index {}",
           policies_.queue->name(), idx);
    seen[idx] = true;
    if (budget <= 0) break;
    Request& r = *requests_.at(snapshot[idx]);
    if (r.fork_parent) {
      // A sibling waits for the first sample's prompt KV to share it rather than recompute it.
      const Request* parent = find(*r.fork_parent);
      if (parent && parent->num_computed_tokens < parent->num_prompt_tokens) continue;
    }
    // This step's prompt-logits rows are spent: it goes first next step.
    if (wants_prompt_logits(r) && prompt_logits_left_ == 0) continue;
    bool admitted = false;
    int64_t num_new = 0;
    while (true) {
      const bool has_slot = static_cast<int64_t>(running_.size()) < config_.max_num_seqs;
      if (has_slot && try_admit(r, budget, view, num_new)) {
        admitted = true;
        break;
      }
      const optim::SchedulerView now = make_view(pending, budget);
      const int64_t waiting_index =
          std::find(waiting_.begin(), waiting_.end(), r.seq_id) - waiting_.begin();
      const std::optional<int64_t> victim = policies_.queue->preempt_for(
          now, waiting_index, has_slot ? optim::BlockedOn::kKvBlocks : optim::BlockedOn::kMaxNumSeqs);
      if (!victim) break;
      if (*victim < 0 || *victim >= static_cast<int64_t>(running_.size()))
        fail(ErrorCode::kInternal, "queue policy '{}' chose running[{}] of {}",
             policies_.queue->name(), *victim, running_.size());
      plan.preempted.push_back(running_[*victim]);
      preempt(running_[*victim], preempt_mode(now, *victim, std::nullopt), pending, budget);
      if (budget <= 0) break;
    }
    if (!admitted) break;
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r.seq_id));
    r.status = RequestStatus::kRunning;
    r.last_admitted_ns = view.now_ns;
    if (r.first_admitted_ns < 0) r.first_admitted_ns = view.now_ns;
    running_.push_back(r.seq_id);
    if (num_new == 0) continue;  // swapped in: runs from the next step
    if (wants_prompt_logits(r)) prompt_logits_left_ -= num_new;
    pending.push_back({r.seq_id, num_new});
    budget -= num_new;
  }
}

}  // namespace optimate::sched
