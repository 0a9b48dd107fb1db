#include "config/engine_cli.h"

#include <algorithm>

#include <CLI/CLI.hpp>

#include "config/settings.h"
#include "core/error.h"

namespace optimate {

void add_engine_flags(CLI::App& app, EngineFlags& f, std::initializer_list<std::string_view> skip) {
  app.add_option("--config", f.config_path, "TOML file with [engine] and [optimizers.NAME] tables");
  for (const SettingInfo& s : engine_settings()) {
    if (std::find(skip.begin(), skip.end(), s.key) != skip.end()) continue;
    const std::string key(s.key);
    const std::string help = std::string(s.help) + " (default " + s.default_toml + ")";
    if (s.kind == SettingKind::kBool) {
      app.add_flag_callback(std::string(s.flag), [&f, key] { f.settings.emplace_back(key, "true"); }, help);
      app.add_flag_callback("--no-" + std::string(s.name()), [&f, key] { f.settings.emplace_back(key, "false"); },
                            "turn " + std::string(s.flag) + " off");
      continue;
    }
    app.add_option_function<std::string>(
        std::string(s.flag), [&f, key](const std::string& v) { f.settings.emplace_back(key, v); }, help);
  }
  app.add_option("--optimizer", f.optimizers, "enable an optimizer: NAME[:key=value,...]; repeatable");
  app.add_flag("--print-config", f.print_config, "print the effective configuration as TOML");
}

EngineConfig resolve_engine_config(const EngineFlags& f) {
  EngineConfig c;
  if (!f.config_path.empty()) c = load_engine_config_file(f.config_path, c);
  for (const auto& [key, text] : f.settings) {
    const SettingInfo* s = find_setting(key);
    OPTIMATE_CHECK(s != nullptr, "no setting '{}'", key);
    s->set_from_text(c, text, s->flag);
  }
  for (const auto& text : f.optimizers) {
    OptimizerSpec spec = parse_optimizer_flag(text);
    std::erase_if(c.optimizers, [&](const OptimizerSpec& o) { return o.name == spec.name; });
    c.optimizers.push_back(std::move(spec));
  }
  c.validate();
  return c;
}

}  // namespace optimate
