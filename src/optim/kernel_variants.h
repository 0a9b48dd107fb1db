// The kernels optimizer: runs chosen variants of the runner's kernel families instead of their
// stable ones (core/kernel_family.h), e.g. `--optimizer kernels:sampling=unfused`. One option
// per family, a variant's name or "" for the stable one; the engine checks the names against
// the runner it runs on and watches the chosen variants (engine/kernel_guard.h).
#pragma once

#include "optim/api/policies.h"

namespace optimate::optim {

class OptimizerRegistry;

class KernelVariantsPolicy final : public KernelPolicy {
 public:
  explicit KernelVariantsPolicy(KernelChoice choice) : choice_(std::move(choice)) {}
  std::string_view name() const override { return "kernels"; }
  KernelChoice choose(std::span<const KernelFamily> families) override { return choice_; }

 private:
  KernelChoice choice_;
};

void register_kernel_optimizer(OptimizerRegistry& registry);

}  // namespace optimate::optim
