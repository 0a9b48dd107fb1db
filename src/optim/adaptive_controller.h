// The adaptive optimizer (the seed's section 3.4): a Controller that watches the engine's
// windowed metrics and retunes it between steps, toward a P99 TTFT and a P99 TPOT target.
//
// Each tick (interval_ms of engine time) reads the signals
//   ttft   = max(P99 TTFT over the window, the oldest waiting request's wait so far)
//   tpot   = P99 TPOT of the sequences that finished within the window
//   queue  = requests waiting; which limit binds (sequences, token budget, KV)
// and forms a wish per knob, which the knob's BoundedKnob turns into a move or not:
//   max_num_seqs            raise while requests queue behind it and TPOT has room (or TTFT
//                           is over and TPOT is not); lower while TPOT is over, TTFT has room
//                           and the lower limit would bind, or while the pool runs dry and
//                           preempts
//   max_num_batched_tokens  the same, when steps fill their token budget (the prefill is what
//                           queues, and what lengthens the steps)
//   kv_quota                on at KV usage >= kv_high with two or more priority classes: a
//                           reserve for the most important class and a cap on one class's long
//                           generations; off below kv_low
//   kv_quant_level          0 (kv_quant's own settings), 1 (8-bit), 2 (4-bit, where the
//                           cache holds it): one up at KV usage >= kv_high while requests
//                           queue or are preempted, one down below kv_low
//   batch_max_wait_ms       from the arrival rate: batch_arrivals / rate, off at low rate
// "Room" means under band x target, so a knob that moved for a latency does not move back
// until that latency is well inside its target (hysteresis); the limits never go past their
// bounds, which never exceed what the runner allocated.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "optim/adaptive_options.h"
#include "optim/api/policies.h"
#include "optim/bounded_knob.h"

namespace optimate::optim {

class OptimizerRegistry;

class AdaptiveController final : public Controller {
 public:
  explicit AdaptiveController(AdaptiveOptions options);
  std::string_view name() const override { return "adaptive"; }
  double interval_ms() const override { return options_.interval_ms; }
  double window_ms() const override { return options_.window_ms; }
  KnobChanges tick(const MetricsView& metrics, const Knobs& knobs) override;
  // ticks; per knob moves.<knob> and reversals.<knob>; the last signals (ttft_ms, tpot_ms,
  // arrival_rate_per_s) and the knobs' current values.
  std::vector<PolicyCounter> counters() const override;

  const AdaptiveOptions& options() const { return options_; }

 private:
  struct Signals {
    double ttft_ms = 0.0;  // max(window P99, oldest wait)
    double tpot_ms = 0.0;  // 0 with too few samples
    bool ttft_over = false;
    bool ttft_room = true;
    bool tpot_over = false;
    bool tpot_room = true;
    bool queued = false;
    bool seqs_bound = false;    // running at (95% of) max_num_seqs
    bool budget_bound = false;  // the last step filled its token budget
    bool kv_tight = false;
    int64_t new_preemptions = 0;
  };

  void derive_bounds(const Knobs& knobs);
  Signals read_signals(const MetricsView& m, const Knobs& k) const;
  std::vector<PolicyCounter> figures(const MetricsView& m, const Signals& s) const;
  void move_batch_limits(const MetricsView& m, const Knobs& k, const Signals& s, KnobChanges& out);
  void move_kv_quota(const MetricsView& m, const Knobs& k, const Signals& s, PolicyKnobs& policy,
                     KnobChanges& out);
  void move_kv_quant(const MetricsView& m, const Knobs& k, const Signals& s, PolicyKnobs& policy,
                     KnobChanges& out);
  void move_batch_wait(const MetricsView& m, const Signals& s, PolicyKnobs& policy, KnobChanges& out);

  AdaptiveOptions options_;
  BoundedKnob seqs_;
  BoundedKnob tokens_;
  BoundedKnob quota_;  // 0 off, 1 on
  BoundedKnob quant_;  // an index into quant_levels_
  std::vector<std::optional<kv::KvPrecision>> quant_levels_;  // weakest (none) first
  BoundedKnob wait_;
  bool bounds_derived_ = false;
  int64_t last_preemptions_ = -1;
  int64_t num_ticks_ = 0;
  Signals last_;
  double last_rate_ = 0.0;
  Knobs last_knobs_;
};

// Registers "adaptive" (AdaptiveOptions::read documents its options).
void register_adaptive_optimizer(OptimizerRegistry& registry);

}  // namespace optimate::optim
