// The registry describes each optimizer's options (names, types, defaults) by building it with
// none set: what the Python package's optimizer classes are made from.
#include <gtest/gtest.h>

#include "core/error.h"
#include "optim/registry.h"

namespace optimate::optim {
namespace {

TEST(RegistryDescribe, ListsOptionsWithTheirDefaults) {
  const OptimizerRegistry registry = OptimizerRegistry::with_builtin();
  const OptimizerInfo info = registry.describe("predictive");
  EXPECT_EQ(info.name, "predictive");
  EXPECT_FALSE(info.description.empty());
  ASSERT_FALSE(info.options.empty());
  EXPECT_EQ(info.options[0].key, "max_wait_ms");
  EXPECT_EQ(std::get<double>(info.options[0].fallback), 50.0);

  const OptimizerInfo priority = registry.describe("priority");
  bool found_levels = false;
  for (const auto& o : priority.options)
    if (o.key == "levels") found_levels = std::get<int64_t>(o.fallback) == 4;
  EXPECT_TRUE(found_levels);
  EXPECT_TRUE(registry.describe("fcfs").options.empty());
}

TEST(RegistryDescribe, EveryDescribedOptionIsAccepted) {
  const OptimizerRegistry registry = OptimizerRegistry::with_builtin();
  for (const std::string& name : registry.names()) {
    OptimizerSpec spec{name, {}};
    for (const auto& o : registry.describe(name).options) spec.options[o.key] = o.fallback;
    EXPECT_NO_THROW(registry.build(spec)) << name;
  }
  EXPECT_THROW(registry.describe("no-such-optimizer"), Error);
}

}  // namespace
}  // namespace optimate::optim
