#include "engine/kernel_guard.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace optimate {

KernelGuard::KernelGuard(ModelRunner& runner) : runner_(runner), families_(runner.kernel_families()) {}

std::string KernelGuard::check(const optim::KernelChoice& choice) const {
  for (const auto& [family, variant] : choice) {
    auto f = std::find_if(families_.begin(), families_.end(), [&](const KernelFamily& k) { return k.name == family; });
    if (f == families_.end()) {
      std::vector<std::string> names;
      for (const KernelFamily& k : families_) names.push_back(k.name);
      return fmt::format("this runner has no kernel family '{}' (it has: {})", family,
                         names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", ")));
    }
    if (std::find(f->variants.begin(), f->variants.end(), variant) == f->variants.end())
      return fmt::format("kernel family '{}' has no variant '{}' (it has: {})", family, variant,
                         fmt::join(f->variants, ", "));
  }
  return {};
}

void KernelGuard::apply(const optim::KernelChoice& choice) {
  if (const std::string problem = check(choice); !problem.empty()) fail(ErrorCode::kInvalidArgument, "{}", problem);
  chosen_.clear();
  for (const KernelFamily& f : families_) {
    auto it = choice.find(f.name);
    if (it != choice.end() && it->second != f.stable) chosen_.emplace_back(f.name, it->second);
  }
  probing_ = false;
  chosen_s_ = stable_twin_s_ = 0.0;
  compared_steps_ = 0;
  set_variants(false);
}

std::string KernelGuard::describe() const {
  std::vector<std::string> parts;
  for (const auto& [family, variant] : chosen_) parts.push_back(family + "=" + variant);
  return fmt::format("{}", fmt::join(parts, ", "));
}

void KernelGuard::set_variants(bool stable) {
  for (const KernelFamily& f : families_) {
    auto it = std::find_if(chosen_.begin(), chosen_.end(), [&](const auto& c) { return c.first == f.name; });
    runner_.set_kernel_variant(f.name, stable || it == chosen_.end() ? f.stable : it->second);
  }
}

bool KernelGuard::begin_step(const char* kind, int64_t num_tokens) {
  bucket_ = {kind, static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(1, num_tokens))))};
  const bool probe = watching() && timings_[bucket_].stable_steps < kProbeSteps;
  if (probe != probing_) set_variants(probe);
  probing_ = probe;
  return probe;
}

std::string KernelGuard::check_outputs(std::span<const float> logits, int64_t num_rows,
                                       std::span<const int32_t> tokens, int64_t vocab) const {
  if (!watching() || probing_) return {};
  // The logits first: a non-finite one is the cause when a token then falls outside too.
  for (int64_t r = 0; r < num_rows && !logits.empty(); ++r) {
    const std::span<const float> row = logits.subspan(static_cast<size_t>(r * vocab), static_cast<size_t>(vocab));
    if (auto bad = std::find_if(row.begin(), row.end(), [](float x) { return !std::isfinite(x); }); bad != row.end())
      return fmt::format("kernels {} gave a non-finite logit ({}) in row {}", describe(), *bad, r);
  }
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      return fmt::format("kernels {} drew token {} for row {}, outside the vocabulary ({})", describe(), tokens[i], i,
                         vocab);
  return {};
}

std::string KernelGuard::end_step(double seconds, double min_ratio) {
  Timing& t = timings_[bucket_];
  if (!watching() || probing_) {
    // A step on the stable kernels: a running mean, recent steps weighing more once there are many.
    const double w = 1.0 / static_cast<double>(std::min<int64_t>(++t.stable_steps, 32));
    t.stable_s += w * (seconds - t.stable_s);
    return {};
  }
  if (t.stable_steps == 0 || min_ratio <= 0) return {};
  chosen_s_ += seconds;
  stable_twin_s_ += t.stable_s;
  if (++compared_steps_ < kMinSteps) return {};
  const double ratio = chosen_s_ > 0 ? stable_twin_s_ / chosen_s_ : 1.0;
  chosen_s_ = stable_twin_s_ = 0.0;
  compared_steps_ = 0;
  if (ratio >= min_ratio) return {};
  return fmt::format("kernels {} ran at {:.0f}% of the stable kernels' throughput over {} steps (bound {:.0f}%)",
                     describe(), ratio * 100, kMinSteps, min_ratio * 100);
}

}  // namespace optimate
