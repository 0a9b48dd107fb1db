// Command-line flags of the engine, one per row of the settings table (engine_settings.def),
// with vLLM's names where vLLM has the flag. Flags override the TOML file given by --config,
// which overrides the defaults.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/engine_config.h"

namespace CLI {
class App;
}

namespace optimate {

struct EngineFlags {
  std::string config_path;
  // (TOML key, text) for every setting flag given, in command-line order.
  std::vector<std::pair<std::string, std::string>> settings;
  std::vector<std::string> optimizers;  // --optimizer name[:key=value,...], repeatable
  bool print_config = false;
};

// Registers the flags on a subcommand (serve, generate); `flags` must outlive parsing. Settings
// whose TOML key is in `skip` get no flag (a subcommand that gives that flag another meaning).
void add_engine_flags(CLI::App& app, EngineFlags& flags, std::initializer_list<std::string_view> skip = {});

// Defaults, then the --config file, then the flags; validated.
EngineConfig resolve_engine_config(const EngineFlags& flags);

}  // namespace optimate
