// What changes between two configurations, for a reload without a restart: each setting that
// differs, and whether it may change while the engine runs (the `hot` column of
// engine_settings.def); and whether the optimizers differ.
#pragma once

#include <string>
#include <vector>

#include "config/engine_config.h"

namespace optimate {

struct SettingDiff {
  std::string key;   // TOML key in [engine], or "optimizers"
  std::string from;  // TOML values (the optimizers: their names, disabled ones marked)
  std::string to;
  bool hot = false;
};

// The settings whose values differ, in table order, then "optimizers" (hot) when the
// optimizer tables differ.
std::vector<SettingDiff> diff_configs(const EngineConfig& active, const EngineConfig& next);
bool same_optimizers(const std::vector<OptimizerSpec>& a, const std::vector<OptimizerSpec>& b);
// Copies every hot setting of `from` into `to`.
void copy_hot_settings(const EngineConfig& from, EngineConfig& to);
// "priority, predictive (disabled)": how a diff shows a list of optimizers.
std::string optimizer_list(const std::vector<OptimizerSpec>& specs);

}  // namespace optimate
