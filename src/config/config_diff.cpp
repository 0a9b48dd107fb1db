#include "config/config_diff.h"

#include "config/settings.h"

namespace optimate {

bool same_optimizers(const std::vector<OptimizerSpec>& a, const std::vector<OptimizerSpec>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].enabled != b[i].enabled || a[i].options != b[i].options) return false;
  return true;
}

std::string optimizer_list(const std::vector<OptimizerSpec>& specs) {
  std::string out;
  for (const OptimizerSpec& s : specs) {
    if (!out.empty()) out += ", ";
    out += s.name;
    if (!s.enabled) out += " (disabled)";
  }
  return out.empty() ? "none" : out;
}

std::vector<SettingDiff> diff_configs(const EngineConfig& active, const EngineConfig& next) {
  std::vector<SettingDiff> out;
  for (const SettingInfo& s : engine_settings()) {
    if (s.kind == SettingKind::kOptimizerAlias) continue;
    std::string from = s.to_toml(active), to = s.to_toml(next);
    if (from != to) out.push_back({std::string(s.key), std::move(from), std::move(to), s.hot});
  }
  if (!same_optimizers(active.optimizers, next.optimizers))
    out.push_back({"optimizers", optimizer_list(active.optimizers), optimizer_list(next.optimizers), true});
  return out;
}

void copy_hot_settings(const EngineConfig& from, EngineConfig& to) {
  for (const SettingInfo& s : engine_settings())
    if (s.hot) s.copy(to, from);
}

}  // namespace optimate
