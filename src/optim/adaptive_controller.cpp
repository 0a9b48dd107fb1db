#include "optim/adaptive_controller.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/logging.h"
#include "optim/registry.h"

namespace optimate::optim {
namespace {

KnobRule limit_rule(const AdaptiveOptions& o) {
  KnobRule r;
  r.up_factor = o.up_factor;
  r.down_factor = o.down_factor;
  r.confirm_intervals = o.confirm_intervals;
  r.cooldown_intervals = o.cooldown_intervals;
  return r;
}

KnobRule switch_rule(const AdaptiveOptions& o, double max, bool integer) {
  KnobRule r = limit_rule(o);
  r.min = 0.0;
  r.max = max;
  r.min_step = 0.0;
  r.integer = integer;
  return r;
}

// A quarter to four times the configured value, within [1, capacity]; an option overrides.
std::pair<double, double> derive(int64_t configured, int64_t capacity, int64_t opt_min, int64_t opt_max) {
  const double cap = static_cast<double>(capacity > 0 ? capacity : std::numeric_limits<int64_t>::max());
  double hi = opt_max > 0 ? static_cast<double>(opt_max) : 4.0 * static_cast<double>(configured);
  double lo = opt_min > 0 ? static_cast<double>(opt_min) : std::max(1.0, std::floor(configured / 4.0));
  hi = std::min(hi, cap);
  lo = std::min(lo, hi);
  return {lo, hi};
}

}  // namespace

AdaptiveController::AdaptiveController(AdaptiveOptions options)
    : options_(options),
      seqs_("max_num_seqs", limit_rule(options)),
      tokens_("max_num_batched_tokens", limit_rule(options)),
      quota_("kv_quota", switch_rule(options, 1.0, true)),
      quant_("kv_quant_level", switch_rule(options, 0.0, true)),
      wait_("batch_max_wait_ms", switch_rule(options, options.batch_max_wait_ms, false)) {}

void AdaptiveController::derive_bounds(const Knobs& k) {
  const auto [seqs_lo, seqs_hi] = derive(k.configured_max_num_seqs, k.capacity_max_num_seqs,
                                         options_.max_num_seqs_min, options_.max_num_seqs_max);
  seqs_.set_bounds(seqs_lo, seqs_hi);
  const auto [tok_lo, tok_hi] = derive(k.configured_max_num_batched_tokens, k.capacity_max_num_batched_tokens,
                                       options_.max_num_batched_tokens_min, options_.max_num_batched_tokens_max);
  tokens_.set_bounds(tok_lo, tok_hi);
  // The precisions the cache can hold, weakest first: none (kv_quant's own settings), 8-bit
  // (fp8 where that is the cache's finest, else int8), int4 where the cache holds it.
  quant_levels_ = {std::nullopt};
  if (k.kv_finest_precision && !kv::is_full_precision(*k.kv_finest_precision)) {
    const kv::KvPrecision finest = *k.kv_finest_precision;
    quant_levels_.push_back(finest == kv::KvPrecision::kFP8 ? finest : kv::KvPrecision::kInt8);
    if (kv::kv_precision_bits(finest) < 8) quant_levels_.push_back(finest);
  }
  quant_.set_bounds(0, static_cast<double>(quant_levels_.size() - 1));
  bounds_derived_ = true;
}

AdaptiveController::Signals AdaptiveController::read_signals(const MetricsView& m, const Knobs& k) const {
  const WindowMetrics& w = m.window;
  Signals s;
  const double ttft_p99 = w.num_ttft_samples >= options_.min_samples ? w.ttft_p99_ms : 0.0;
  s.ttft_ms = std::max(ttft_p99, m.oldest_waiting_ms);
  s.tpot_ms = w.num_tpot_samples >= options_.min_samples ? w.tpot_p99_ms : 0.0;
  if (options_.ttft_p99_ms > 0) {
    s.ttft_over = s.ttft_ms > options_.ttft_p99_ms;
    s.ttft_room = s.ttft_ms < options_.band * options_.ttft_p99_ms;
  }
  if (options_.tpot_p99_ms > 0) {
    s.tpot_over = s.tpot_ms > options_.tpot_p99_ms;
    s.tpot_room = s.tpot_ms < options_.band * options_.tpot_p99_ms;
  }
  s.queued = m.num_waiting > 0;
  // Near the limit counts: the running count hovers just under it while requests finish and
  // others take their slots.
  s.seqs_bound = static_cast<double>(m.num_running) >= 0.95 * static_cast<double>(k.max_num_seqs);
  s.budget_bound = static_cast<double>(m.last_step_num_tokens) >= 0.9 * static_cast<double>(k.max_num_batched_tokens);
  s.kv_tight = m.kv_usage >= options_.kv_high;
  s.new_preemptions = last_preemptions_ < 0 ? 0 : m.num_preemptions - last_preemptions_;
  return s;
}

std::vector<PolicyCounter> AdaptiveController::figures(const MetricsView& m, const Signals& s) const {
  return {{"ttft_ms", s.ttft_ms},
          {"ttft_p99_ms", m.window.ttft_p99_ms},
          {"oldest_waiting_ms", m.oldest_waiting_ms},
          {"tpot_p99_ms", m.window.tpot_p99_ms},
          {"num_waiting", static_cast<double>(m.num_waiting)},
          {"num_running", static_cast<double>(m.num_running)},
          {"kv_usage", m.kv_usage},
          {"arrival_rate_per_s", m.window.arrival_rate_per_s},
          {"step_ms_mean", m.window.step_ms_mean}};
}

void AdaptiveController::move_batch_limits(const MetricsView& m, const Knobs& k, const Signals& s,
                                           KnobChanges& out) {
  // Raising a limit is worth it while requests queue behind it, latency allows, and the pool
  // has room for more sequences.
  const bool may_raise = s.queued && !s.kv_tight && !s.tpot_over && (s.ttft_over || s.tpot_room);
  const bool lower_for_tpot = s.tpot_over && s.ttft_room;
  const bool lower_for_kv = s.kv_tight && s.new_preemptions > 0;
  // A lower limit helps TPOT only where it binds: the sequences running would exceed it, or
  // the steps fill their token budget.
  const bool seqs_would_bind =
      static_cast<double>(m.num_running) >= options_.down_factor * static_cast<double>(k.max_num_seqs);

  Wish seqs_wish = Wish::kHold;
  const char* seqs_reason = "";
  if (lower_for_kv) {
    seqs_wish = Wish::kLower;
    seqs_reason = "KV pool exhausted: preemptions";
  } else if (lower_for_tpot && seqs_would_bind) {
    seqs_wish = Wish::kLower;
    seqs_reason = "tpot_p99 over target";
  } else if (may_raise && s.seqs_bound) {
    seqs_wish = Wish::kRaise;
    seqs_reason = s.ttft_over ? "ttft_p99 over target, requests queue at max_num_seqs"
                              : "requests queue at max_num_seqs, latency has room";
  }
  // Lowering for the pool starts from the sequences running (a limit above them frees
  // nothing); lowering for TPOT from the limit, a step at a time, so that the queue it causes
  // shows in TTFT before the limit has gone far.
  const double seqs_base = lower_for_kv
      ? static_cast<double>(std::min(k.max_num_seqs, std::max<int64_t>(1, m.num_running)))
      : static_cast<double>(k.max_num_seqs);
  if (auto v = seqs_.step(seqs_base, seqs_wish); v && *v != static_cast<double>(k.max_num_seqs)) {
    out.max_num_seqs = static_cast<int64_t>(*v);
    out.actions.push_back({seqs_.name(), static_cast<double>(k.max_num_seqs), *v, seqs_reason, figures(m, s)});
  }

  Wish tokens_wish = Wish::kHold;
  const char* tokens_reason = "";
  if (lower_for_tpot && s.budget_bound) {
    tokens_wish = Wish::kLower;
    tokens_reason = "tpot_p99 over target";
  } else if (may_raise && s.budget_bound) {
    tokens_wish = Wish::kRaise;
    tokens_reason = s.ttft_over ? "ttft_p99 over target, prefill fills the token budget"
                                : "prefill fills the token budget, latency has room";
  }
  if (auto v = tokens_.step(static_cast<double>(k.max_num_batched_tokens), tokens_wish)) {
    out.max_num_batched_tokens = static_cast<int64_t>(*v);
    out.actions.push_back({tokens_.name(), static_cast<double>(k.max_num_batched_tokens), *v, tokens_reason,
                           figures(m, s)});
  }
}

void AdaptiveController::move_kv_quota(const MetricsView& m, const Knobs& k, const Signals& s,
                                       PolicyKnobs& policy, KnobChanges& out) {
  const bool on = policy.kv_quota.active();
  bool want = on;
  if (!options_.kv_quota || m.classes.size() < 2) want = false;
  else if (m.kv_usage >= options_.kv_high) want = true;
  else if (m.kv_usage < options_.kv_low) want = false;
  const auto v = quota_.track(on ? 1.0 : 0.0, want ? 1.0 : 0.0, 0.5);
  if (!v) return;
  KvQuota quota;
  if (*v > 0.5) {
    const int64_t num_blocks = std::max(k.num_kv_blocks, m.num_kv_blocks);
    quota.reserve_blocks = static_cast<int64_t>(options_.reserve_share * static_cast<double>(num_blocks));
    quota.reserve_min_priority = m.classes.front().priority;
    quota.long_max_share = options_.long_max_share;
    quota.long_min_tokens = options_.long_min_tokens;
  }
  policy.kv_quota = quota;
  std::vector<PolicyCounter> f = figures(m, s);
  for (const ClassMetrics& c : m.classes) {
    f.push_back({"kv_blocks.p" + std::to_string(c.priority.value), static_cast<double>(c.kv_blocks)});
    f.push_back({"long_kv_blocks.p" + std::to_string(c.priority.value), static_cast<double>(c.long_kv_blocks)});
  }
  out.actions.push_back({"kv_quota.reserve_blocks", static_cast<double>(k.policy.kv_quota.reserve_blocks),
                         static_cast<double>(quota.reserve_blocks),
                         *v > 0.5 ? "KV usage at or above kv_high" : "KV usage below kv_low", f});
}

void AdaptiveController::move_kv_quant(const MetricsView& m, const Knobs& k, const Signals& s,
                                       PolicyKnobs& policy, KnobChanges& out) {
  if (!options_.kv_quant || quant_levels_.size() < 2) return;
  const auto at = std::find(quant_levels_.begin(), quant_levels_.end(), policy.kv_quant_precision);
  const auto level = static_cast<double>(at == quant_levels_.end() ? 0 : at - quant_levels_.begin());
  double target = level;
  const char* reason = "";
  if (s.kv_tight && (s.queued || s.new_preemptions > 0)) {
    target = level + 1;
    reason = "KV usage at or above kv_high, requests waiting for blocks";
  } else if (m.kv_usage < options_.kv_low) {
    target = level - 1;
    reason = "KV usage below kv_low";
  }
  const auto v = quant_.track(level, target, 0.25);
  if (!v) return;
  policy.kv_quant_precision = quant_levels_[static_cast<size_t>(*v)];
  auto name = [](const std::optional<kv::KvPrecision>& p) {
    return std::string(p ? kv::kv_precision_name(*p) : "kv_quant's own");
  };
  std::vector<PolicyCounter> f = figures(m, s);
  f.push_back({"num_preemptions_new", static_cast<double>(s.new_preemptions)});
  out.actions.push_back({quant_.name(), level, *v,
                         std::string(reason) + " (" + name(k.policy.kv_quant_precision) + " -> " +
                             name(policy.kv_quant_precision) + ")",
                         f});
}

void AdaptiveController::move_batch_wait(const MetricsView& m, const Signals& s, PolicyKnobs& policy,
                                         KnobChanges& out) {
  if (!options_.batch_wait) return;
  const double rate = m.window.arrival_rate_per_s;
  const double max_ms = options_.batch_max_wait_ms;
  const double current = policy.batch_max_wait_ms.value_or(max_ms);
  // Arrivals expected within the longest hold: off under one (a hold would gather nothing, the
  // seed's section 5.1), back on from two (hysteresis).
  const double expected = rate * max_ms * 1e-3;
  const bool on = current > 0;
  double target = 0.0;
  if (expected >= (on ? 1.0 : 2.0)) {
    target = std::min(max_ms, options_.batch_arrivals / rate * 1e3);
    if (options_.ttft_p99_ms > 0) target = std::min(target, 0.1 * options_.ttft_p99_ms);
  }
  std::optional<double> v;
  if (!policy.batch_max_wait_ms) v = wait_.clamp(target);  // first tick: take over at once
  else v = wait_.track(current, target, 0.25);
  if (!v) return;
  policy.batch_max_wait_ms = *v;
  out.actions.push_back({wait_.name(), current, *v,
                         *v == 0.0 ? "arrival rate too low for a hold to gather requests"
                                   : "hold sized to the arrival rate",
                         figures(m, s)});
}

KnobChanges AdaptiveController::tick(const MetricsView& m, const Knobs& k) {
  ++num_ticks_;
  if (!bounds_derived_) derive_bounds(k);
  const Signals s = read_signals(m, k);
  KnobChanges out;
  move_batch_limits(m, k, s, out);
  PolicyKnobs policy = k.policy;
  move_kv_quota(m, k, s, policy, out);
  move_kv_quant(m, k, s, policy, out);
  move_batch_wait(m, s, policy, out);
  if (!(policy == k.policy)) out.policy = policy;
  last_preemptions_ = m.num_preemptions;
  last_ = s;
  last_rate_ = m.window.arrival_rate_per_s;
  last_knobs_ = k;
  if (out.max_num_seqs) last_knobs_.max_num_seqs = *out.max_num_seqs;
  if (out.max_num_batched_tokens) last_knobs_.max_num_batched_tokens = *out.max_num_batched_tokens;
  if (out.policy) last_knobs_.policy = *out.policy;
  return out;
}

void register_adaptive_optimizer(OptimizerRegistry& registry) {
  registry.register_optimizer(
      "adaptive", "retunes batch limits, KV quotas and batch holds toward TTFT/TPOT targets",
      [](OptionReader& reader) {
        PolicySet set;
        set.controller = std::make_shared<AdaptiveController>(AdaptiveOptions::read(reader));
        return set;
      });
}

std::vector<PolicyCounter> AdaptiveController::counters() const {
  std::vector<PolicyCounter> out = {{"ticks", static_cast<double>(num_ticks_)},
                                    {"ttft_ms", last_.ttft_ms},
                                    {"tpot_ms", last_.tpot_ms},
                                    {"arrival_rate_per_s", last_rate_},
                                    {"max_num_seqs", static_cast<double>(last_knobs_.max_num_seqs)},
                                    {"max_num_batched_tokens", static_cast<double>(last_knobs_.max_num_batched_tokens)},
                                    {"kv_quota_reserve_blocks", static_cast<double>(last_knobs_.policy.kv_quota.reserve_blocks)},
                                    {"batch_max_wait_ms", last_knobs_.policy.batch_max_wait_ms.value_or(-1.0)}};
  out.push_back({"kv_quant_bits", last_knobs_.policy.kv_quant_precision
                                      ? static_cast<double>(kv::kv_precision_bits(*last_knobs_.policy.kv_quant_precision))
                                      : 0.0});
  for (const BoundedKnob* knob : {&seqs_, &tokens_, &quota_, &quant_, &wait_}) {
    out.push_back({"moves." + knob->name(), static_cast<double>(knob->num_moves())});
    out.push_back({"reversals." + knob->name(), static_cast<double>(knob->num_reversals())});
  }
  return out;
}

}  // namespace optimate::optim
