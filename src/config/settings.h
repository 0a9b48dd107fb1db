// The table of engine settings (engine_settings.def), as data: what the flags, the TOML reader
// and writer, validation, `optimate settings` and the Python package iterate over.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace optimate {

struct EngineConfig;

enum class SettingKind { kString, kInt, kDouble, kBool, kBytes, kSeed, kChoice, kOptimizerAlias };

struct SettingInfo {
  std::string_view key;    // the TOML key in [engine]
  std::string_view flag;   // the command-line flag, e.g. --max-num-seqs
  std::string_view help;
  SettingKind kind = SettingKind::kString;
  bool hot = false;        // may change while the engine runs (between steps)
  std::string default_toml;  // the default, as a TOML value ("256", "\"auto\"")

  // The value in `config` as a TOML value; empty for an alias (it is printed as the
  // optimizer it enables).
  std::function<std::string(const EngineConfig& config)> to_toml;
  // Sets the value from text as a command line gives it (a size for kBytes, "true"/"false"
  // for kBool). Error(kInvalidArgument) naming `where` when the text is not of the kind.
  std::function<void(EngineConfig& config, std::string_view text, std::string_view where)> set_from_text;
  // Error(kInvalidArgument) "<name> must be <rule>, got <value>" when the value breaks its rule.
  std::function<void(const EngineConfig& config)> check;
  // Sets `to`'s value to `from`'s (nothing for an alias).
  std::function<void(EngineConfig& to, const EngineConfig& from)> copy;

  // The flag without its dashes: how validation names the setting.
  std::string_view name() const { return flag.substr(2); }
};

// Every setting, in the order of engine_settings.def.
const std::vector<SettingInfo>& engine_settings();
// By TOML key; null when there is none.
const SettingInfo* find_setting(std::string_view key);

// The settings as a Markdown table (TOML key, flag, default, run time, meaning), as
// docs/configuration.md shows it.
std::string settings_markdown();

}  // namespace optimate
