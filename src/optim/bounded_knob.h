// One knob a controller moves: bounded, rate-limited and with hysteresis, so that a noisy
// signal cannot make it oscillate. Every knob of the adaptive controller is one of these; a
// new knob (a KV precision level, say) is one more BoundedKnob and one more field in
// PolicyKnobs, with no new control logic.
//
//   - bounds: the value stays in [min, max];
//   - hysteresis: a wish to move must repeat for confirm_intervals ticks in a row, and the
//     signals that form it have a dead band (the controller's job, see adaptive_controller.h);
//   - rate limit: at least cooldown_intervals ticks between two moves, twice that after a
//     reversal of direction, so a knob that swings back waits longer before swinging again;
//   - steps: multiplicative (up_factor, down_factor), at least `min_step` per move.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace optimate::optim {

struct KnobRule {
  double min = 0.0;
  double max = 0.0;
  double up_factor = 1.25;
  double down_factor = 0.8;
  double min_step = 1.0;         // integer knobs move by at least one
  bool integer = true;           // round to whole numbers
  int64_t confirm_intervals = 2;
  int64_t cooldown_intervals = 2;
};

enum class Wish { kLower = -1, kHold = 0, kRaise = 1 };

class BoundedKnob {
 public:
  BoundedKnob(std::string name, KnobRule rule) : name_(std::move(name)), rule_(rule) {}

  // One controller interval with the knob at `current`: the new value when the knob moves.
  std::optional<double> step(double current, Wish wish);
  // For a knob computed from a measurement: moves straight to `target` (clamped) when it
  // differs from `current` by more than `deadband` (relative, or absolute when current is 0)
  // for confirm_intervals ticks, within the same rate limit.
  std::optional<double> track(double current, double target, double deadband);

  const std::string& name() const { return name_; }
  const KnobRule& rule() const { return rule_; }
  void set_bounds(double min, double max) { rule_.min = min; rule_.max = max; }
  double clamp(double v) const;
  int64_t num_moves() const { return num_moves_; }
  int64_t num_reversals() const { return num_reversals_; }

 private:
  // Applies the confirmation count and the cooldown to a wish in `direction`; true when the
  // knob may move this tick.
  bool ready(int direction);
  std::optional<double> commit(double current, double next);

  std::string name_;
  KnobRule rule_;
  int last_wish_ = 0;
  int64_t wish_streak_ = 0;
  int64_t ticks_since_move_ = 1 << 20;
  int last_direction_ = 0;
  bool last_was_reversal_ = false;
  int64_t num_moves_ = 0;
  int64_t num_reversals_ = 0;
};

}  // namespace optimate::optim
