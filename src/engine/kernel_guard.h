// The kernels slot as it runs: the variant each of the runner's kernel families runs
// (runner/model_runner.h, kernel_families), and the watch over a variant other than a family's
// stable one. While one runs, every step is checked:
//   - its sampled rows' logits are finite (rows sampled on the host) and its tokens are inside
//     the vocabulary (either sampler): a step that fails is a fault, run again on the stable
//     kernels, so no request in flight loses a token;
//   - it is not slower than its stable twin by the guard's rule: per kind of step and size
//     (step_kind, tokens rounded up to a power of two), the stable kernels' time is measured
//     (steps that ran on them, or a few probe steps run on them when no such step ran yet), and
//     once kMinSteps steps on the chosen kernels have a stable time to compare with, their
//     throughput relative to it must be at least the engine's optimizer_min_throughput_ratio.
// The engine falls back from the optimizer filling the slot on either (engine_optimizers.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/kernel_family.h"
#include "optim/api/policies.h"
#include "runner/model_runner.h"

namespace optimate {

class KernelGuard {
 public:
  static constexpr int64_t kMinSteps = 8;    // steps on the chosen kernels before a verdict
  static constexpr int64_t kProbeSteps = 2;  // steps on the stable ones that give a size its time

  explicit KernelGuard(ModelRunner& runner);

  const std::vector<KernelFamily>& families() const { return families_; }
  // Why `choice` cannot run on this runner (an unknown family or variant); empty when it can.
  std::string check(const optim::KernelChoice& choice) const;
  // Runs `choice` from the next step on (families left out run their stable variant).
  // Error(kInvalidArgument) when check() finds a problem; nothing changes then.
  void apply(const optim::KernelChoice& choice);
  // A family runs a variant other than its stable one.
  bool watching() const { return !chosen_.empty(); }
  // "sampling=unfused, elementwise=separate": the variants other than the stable ones.
  std::string describe() const;

  // Before a step of `kind` over `num_tokens` tokens: true when it runs on the stable kernels
  // to measure them (a probe); the runner is switched for that one step.
  bool begin_step(const char* kind, int64_t num_tokens);
  // The step's outcome: its sampled rows' logits (empty when it sampled on the device), their
  // tokens and the vocabulary. A fault's description, or empty.
  std::string check_outputs(std::span<const float> logits, int64_t num_rows, std::span<const int32_t> tokens,
                            int64_t vocab) const;
  // The step took `seconds`; a fault's description when the chosen kernels ran below
  // `min_ratio` of the stable ones' throughput (0: no rule), or empty.
  std::string end_step(double seconds, double min_ratio);

 private:
  struct Timing {
    double stable_s = 0.0;  // mean step time on the stable kernels
    int64_t stable_steps = 0;
  };
  void set_variants(bool stable);

  ModelRunner& runner_;
  std::vector<KernelFamily> families_;
  std::vector<std::pair<std::string, std::string>> chosen_;  // (family, variant) off their stable ones
  std::map<std::pair<std::string, int64_t>, Timing> timings_;
  std::pair<std::string, int64_t> bucket_;
  bool probing_ = false;
  double chosen_s_ = 0.0;         // the chosen kernels' time and their stable twins', summed over
  double stable_twin_s_ = 0.0;    // the steps that had a stable time to compare with
  int64_t compared_steps_ = 0;
};

}  // namespace optimate
