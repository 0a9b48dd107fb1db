#include "optim/bounded_knob.h"

#include <algorithm>
#include <cmath>

namespace optimate::optim {

double BoundedKnob::clamp(double v) const {
  v = std::clamp(v, rule_.min, std::max(rule_.min, rule_.max));
  return rule_.integer ? std::round(v) : v;
}

bool BoundedKnob::ready(int direction) {
  ++ticks_since_move_;
  if (direction == 0) {
    last_wish_ = 0;
    wish_streak_ = 0;
    return false;
  }
  wish_streak_ = direction == last_wish_ ? wish_streak_ + 1 : 1;
  last_wish_ = direction;
  if (wish_streak_ < rule_.confirm_intervals) return false;
  const int64_t cooldown = rule_.cooldown_intervals * (last_was_reversal_ ? 2 : 1);
  return ticks_since_move_ > cooldown;
}

std::optional<double> BoundedKnob::commit(double current, double next) {
  next = clamp(next);
  if (next == current) return std::nullopt;
  const int direction = next > current ? 1 : -1;
  last_was_reversal_ = last_direction_ != 0 && direction != last_direction_;
  if (last_was_reversal_) ++num_reversals_;
  last_direction_ = direction;
  ticks_since_move_ = 0;
  wish_streak_ = 0;
  ++num_moves_;
  return next;
}

std::optional<double> BoundedKnob::step(double current, Wish wish) {
  const int direction = static_cast<int>(wish);
  if (!ready(direction)) return std::nullopt;
  double next = direction > 0 ? current * rule_.up_factor : current * rule_.down_factor;
  if (std::abs(next - current) < rule_.min_step) next = current + direction * rule_.min_step;
  return commit(current, next);
}

std::optional<double> BoundedKnob::track(double current, double target, double deadband) {
  target = clamp(target);
  const double scale = current != 0.0 ? std::abs(current) : 1.0;
  const bool outside = std::abs(target - current) > deadband * scale;
  const int direction = !outside ? 0 : (target > current ? 1 : -1);
  if (!ready(direction)) return std::nullopt;
  return commit(current, target);
}

}  // namespace optimate::optim
