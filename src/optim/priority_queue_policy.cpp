#include "optim/priority_queue_policy.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/logging.h"
#include "optim/kv_quota.h"

namespace optimate::optim {
namespace {

bool recently_admitted(const PriorityOptions& o, const RequestView& r, int64_t now_ns) {
  return r.admitted_ns >= 0 && static_cast<double>(now_ns - r.admitted_ns) < o.min_run_ms * 1e6;
}

// Victim order: lowest level, then the fewest computed tokens (the least work to redo: a
// victim is recomputed, or its KV copied out, in proportion to them), then newest arrival, then
// the later sequence of a request.
bool better_victim(const PriorityOptions& o, const RequestView& a, const RequestView& b) {
  const int64_t la = o.level_of(a.metadata.priority), lb = o.level_of(b.metadata.priority);
  if (la != lb) return la < lb;
  if (a.num_computed_tokens != b.num_computed_tokens) return a.num_computed_tokens < b.num_computed_tokens;
  if (a.arrival_ns != b.arrival_ns) return a.arrival_ns > b.arrival_ns;
  return a.seq_id > b.seq_id;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

PriorityQueuePolicy::PriorityQueuePolicy(PriorityOptions options)
    : options_(std::move(options)),
      waiting_by_level_(static_cast<size_t>(options_.levels), 0),
      oldest_wait_ms_by_level_(static_cast<size_t>(options_.levels), 0.0) {}

double PriorityQueuePolicy::aged_priority(const RequestView& r, int64_t now_ns) const {
  const double value = static_cast<double>(r.metadata.priority.value);
  if (options_.aging_ms <= 0) return value;
  const double waited_ms = static_cast<double>(std::max<int64_t>(0, now_ns - r.arrival_ns)) * 1e-6;
  return value + waited_ms / options_.aging_ms;
}

// Any waiting request past its deadline, preempted ones too: a request evicted after its
// first admission would otherwise be the one that starves.
bool PriorityQueuePolicy::overdue(const RequestView& r, int64_t now_ns) const {
  return now_ns - r.arrival_ns >= options_.max_wait_ns(options_.level_of(r.metadata.priority));
}

void PriorityQueuePolicy::observe_admissions(const SchedulerView& view) {
  std::unordered_set<int64_t> waiting;
  waiting.reserve(view.waiting.size());
  for (const RequestView& r : view.waiting) waiting.insert(r.seq_id);
  for (int64_t seq : known_waiting_) {
    if (waiting.count(seq)) continue;
    ++num_admissions_;
    jump_credit_ = std::min(1.0, jump_credit_ + options_.overdue_share);
    if (seq == jump_seq_) {
      ++num_overdue_admissions_;
      jump_credit_ -= 1.0;
    }
  }
  known_waiting_ = std::move(waiting);
}

std::vector<int64_t> PriorityQueuePolicy::order_waiting(const SchedulerView& view) {
  observe_admissions(view);
  const int64_t now = view.now_ns;
  const size_t n = view.waiting.size();
  struct Key {
    int64_t level;
    bool overdue;
    int64_t deadline_ns;
    double aged;
  };
  std::vector<Key> keys(n);
  std::fill(waiting_by_level_.begin(), waiting_by_level_.end(), 0);
  std::fill(oldest_wait_ms_by_level_.begin(), oldest_wait_ms_by_level_.end(), 0.0);
  std::unordered_set<int64_t> still_overdue;
  for (size_t i = 0; i < n; ++i) {
    const RequestView& r = view.waiting[i];
    const int64_t level = options_.level_of(r.metadata.priority);
    keys[i] = {level, overdue(r, now), r.arrival_ns + options_.max_wait_ns(level), aged_priority(r, now)};
    ++waiting_by_level_[level];
    oldest_wait_ms_by_level_[level] =
        std::max(oldest_wait_ms_by_level_[level], static_cast<double>(now - r.arrival_ns) * 1e-6);
    if (keys[i].overdue) {
      still_overdue.insert(r.seq_id);
      if (!overdue_seen_.count(r.seq_id)) {
        ++max_wait_reached_;
        spdlog::debug("priority: request '{}' ({}) waited {:.0f} ms, past its max_wait_ms",
                      r.request_id, options_.level_name(level),
                      static_cast<double>(now - r.arrival_ns) * 1e-6);
      }
    }
  }
  overdue_seen_ = std::move(still_overdue);

  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const Key& ka = keys[a];
    const Key& kb = keys[b];
    if (ka.level != kb.level) return ka.level > kb.level;
    if (ka.overdue != kb.overdue) return ka.overdue;
    if (ka.overdue) {
      if (ka.deadline_ns != kb.deadline_ns) return ka.deadline_ns < kb.deadline_ns;
    } else if (ka.aged != kb.aged) {
      return ka.aged > kb.aged;
    }
    const RequestView& ra = view.waiting[a];
    const RequestView& rb = view.waiting[b];
    if (ra.arrival_ns != rb.arrival_ns) return ra.arrival_ns < rb.arrival_ns;
    return ra.seq_id < rb.seq_id;
  });

  // The starvation bound: the overdue request of a less important level with the earliest
  // deadline goes first, while such jumps stay within overdue_share of admissions.
  jump_seq_ = -1;
  if (n > 1 && options_.overdue_share > 0 && jump_credit_ >= 1.0) {
    const int64_t head_level = keys[order[0]].level;
    std::optional<size_t> best;
    for (size_t pos = 1; pos < n; ++pos) {
      const Key& k = keys[order[pos]];
      if (!k.overdue || k.level >= head_level) continue;
      if (!best || k.deadline_ns < keys[order[*best]].deadline_ns) best = pos;
    }
    if (best) {
      std::rotate(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(*best),
                  order.begin() + static_cast<std::ptrdiff_t>(*best) + 1);
      const RequestView& r = view.waiting[order[0]];
      jump_seq_ = r.seq_id;
      spdlog::debug("priority: overdue request '{}' ({}) goes ahead of the {} queue",
                    r.request_id, options_.level_name(keys[order[0]].level),
                    options_.level_name(head_level));
    }
  }
  std::vector<std::pair<int64_t, QuotaHold>> held;
  order = apply_kv_quota(view, std::move(order), &held);
  for (const auto& [idx, hold] : held) ++(hold == QuotaHold::kFootprint ? kv_footprint_holds_ : kv_quota_holds_);
  return order;
}

std::optional<int64_t> PriorityQueuePolicy::preempt_for(const SchedulerView& view,
                                                        int64_t waiting_index, BlockedOn blocked_on) {
  if (!options_.preempt) return std::nullopt;
  OPTIMATE_CHECK(waiting_index >= 0 && waiting_index < static_cast<int64_t>(view.waiting.size()),
                 "preempt_for: waiting index {} of {}", waiting_index, view.waiting.size());
  const RequestView& w = view.waiting[waiting_index];
  const int64_t level = options_.level_of(w.metadata.priority);
  // Candidates: strictly less important, not just (re)admitted, and not admitted past their
  // deadline (the starvation bound would mean nothing if they could be evicted again).
  std::vector<int64_t> candidates;
  bool refused = false;
  for (size_t i = 0; i < view.running.size(); ++i) {
    const RequestView& r = view.running[i];
    if (options_.level_of(r.metadata.priority) >= level) continue;
    if (r.admitted_ns - r.arrival_ns >= options_.max_wait_ns(options_.level_of(r.metadata.priority))) continue;
    if (recently_admitted(options_, r, view.now_ns)) {
      refused = true;
      continue;
    }
    candidates.push_back(static_cast<int64_t>(i));
  }
  if (candidates.empty()) {
    if (refused) ++refused_min_run_;
    return std::nullopt;
  }
  // The blocks admitting the request takes (KvView: its whole uncomputed prompt or its first
  // chunk, and the watermark); an upper bound: prefix-cache hits not counted.
  const int64_t bs = std::max<int64_t>(1, view.kv.block_size);
  const int64_t tokens = view.kv.admits_whole_prompt
                             ? w.num_prompt_tokens + w.num_output_tokens - w.num_computed_tokens
                             : std::min(w.num_prompt_tokens + w.num_output_tokens, std::max<int64_t>(1, view.token_budget_left));
  const int64_t need = ceil_div(std::max<int64_t>(1, tokens), bs) + view.kv.watermark_blocks;
  // Short of KV (blocked for blocks, or for a slot with too few blocks free as well), a victim's
  // blocks go to the request and the victim is computed again: wait preempt_after_ms first.
  if ((blocked_on == BlockedOn::kKvBlocks || need > view.kv.num_free_blocks) &&
      static_cast<double>(view.now_ns - w.arrival_ns) < options_.preempt_after_ms * 1e6) {
    ++deferred_;
    return std::nullopt;
  }
  std::sort(candidates.begin(), candidates.end(), [&](int64_t a, int64_t b) {
    return better_victim(options_, view.running[a], view.running[b]);
  });
  if (blocked_on == BlockedOn::kKvBlocks) {
    // Only preempt when the candidates can free enough for the request's next chunk.
    int64_t reachable = view.kv.num_free_blocks;
    for (int64_t c : candidates) reachable += view.running[c].num_blocks;
    if (reachable < need) return std::nullopt;
  }
  int64_t victim = candidates.front();
  const int64_t deficit = need - view.kv.num_free_blocks;
  if (deficit > 0) {
    // Short of blocks: of the least important level, the victim with the least work to redo
    // that covers the shortage alone, rather than several smaller ones.
    const int64_t lowest = options_.level_of(view.running[victim].metadata.priority);
    for (int64_t c : candidates) {
      const RequestView& r = view.running[c];
      if (options_.level_of(r.metadata.priority) != lowest) break;
      if (r.num_blocks >= deficit) {
        victim = c;
        break;
      }
    }
  }
  const RequestView& v = view.running[victim];
  (blocked_on == BlockedOn::kKvBlocks ? preempted_for_kv_ : preempted_for_slots_)++;
  spdlog::debug("priority: preempting '{}' ({}) for '{}' ({}): {}", v.request_id,
                options_.level_name(options_.level_of(v.metadata.priority)), w.request_id,
                options_.level_name(level),
                blocked_on == BlockedOn::kKvBlocks ? "KV blocks exhausted" : "max_num_seqs reached");
  return victim;
}

std::vector<PolicyCounter> PriorityQueuePolicy::counters() const {
  std::vector<PolicyCounter> out = {
      {"preemptions_for_max_num_seqs", static_cast<double>(preempted_for_slots_)},
      {"preemptions_for_kv_blocks", static_cast<double>(preempted_for_kv_)},
      {"preemptions_refused_min_run", static_cast<double>(refused_min_run_)},
      {"preemptions_deferred", static_cast<double>(deferred_)},
      {"max_wait_reached", static_cast<double>(max_wait_reached_)},
      {"overdue_admissions", static_cast<double>(num_overdue_admissions_)},
      {"admissions", static_cast<double>(num_admissions_)},
      {"kv_quota_holds", static_cast<double>(kv_quota_holds_)},
      {"kv_footprint_holds", static_cast<double>(kv_footprint_holds_)},
  };
  for (int64_t level = 0; level < options_.levels; ++level) {
    const std::string name = options_.level_name(level);
    out.push_back({"waiting." + name, static_cast<double>(waiting_by_level_[level])});
    out.push_back({"oldest_wait_ms." + name, oldest_wait_ms_by_level_[level]});
  }
  return out;
}

PreemptDecision PriorityVictimPolicy::choose_victim(const SchedulerView& view,
                                                    std::span<const int64_t> candidates) {
  OPTIMATE_CHECK(!candidates.empty(), "no preemption candidates");
  ++num_victims_;
  // A long generation of a class over its KV share goes first (a controller's quota).
  if (const std::optional<int64_t> over = over_share_victim(view, candidates)) {
    ++num_quota_victims_;
    return {*over};
  }
  // Prefer candidates past min_run_ms; the pool must give, so fall back to all of them.
  std::optional<int64_t> best, best_protected;
  for (int64_t i : candidates) {
    const RequestView& r = view.running[i];
    auto& slot = recently_admitted(options_, r, view.now_ns) ? best_protected : best;
    if (!slot || better_victim(options_, r, view.running[*slot])) slot = i;
  }
  if (!best) ++num_protected_victims_;
  const int64_t victim = best ? *best : *best_protected;
  const RequestView& v = view.running[victim];
  spdlog::debug("priority: KV pool exhausted, preempting '{}' ({})", v.request_id,
                options_.level_name(options_.level_of(v.metadata.priority)));
  return {victim};
}

std::vector<PolicyCounter> PriorityVictimPolicy::counters() const {
  return {{"preemptions_kv_exhausted", static_cast<double>(num_victims_)},
          {"victims_within_min_run", static_cast<double>(num_protected_victims_)},
          {"victims_over_kv_share", static_cast<double>(num_quota_victims_)}};
}

}  // namespace optimate::optim
