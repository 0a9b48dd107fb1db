#include "optim/kernel_variants.h"

#include "optim/registry.h"

namespace optimate::optim {

void register_kernel_optimizer(OptimizerRegistry& registry) {
  registry.register_optimizer(
      "kernels", "run other variants of the runner's kernels (fused or unfused sampling, ...), falling back to the "
                 "stable ones when a variant misbehaves or runs slower",
      [](OptionReader& reader) {
        KernelChoice choice;
        for (std::string_view family : kKernelFamilyNames) {
          std::string variant = reader.get_string(std::string(family), "");
          if (!variant.empty()) choice.emplace(family, std::move(variant));
        }
        PolicySet set;
        set.kernels = std::make_shared<KernelVariantsPolicy>(std::move(choice));
        return set;
      });
}

}  // namespace optimate::optim
