// The engine's settings as one list (name, type, default, CLI flag, help), and an EngineConfig
// built from named values: what the Python package's EngineArgs is generated from and handed
// to. Today both are derived from EngineConfig's TOML form and the engine's CLI flags, so a
// setting added there appears in Python with no change here.
#pragma once

#include <string>
#include <vector>

#include "config/engine_config.h"

namespace optimate::python {

struct EngineSetting {
  std::string name;   // the TOML key under [engine], and EngineArgs' field
  std::string type;   // "str", "int", "float" or "bool"
  OptionValue default_value;
  std::string flag;   // the command-line flag, e.g. --max-num-seqs
  std::string help;
};

// Every setting of [engine], in the order `optimate serve --help` lists them.
std::vector<EngineSetting> engine_settings();

// Defaults overridden by `values` (keys as in engine_settings(); a size setting such as
// kv_cache_memory also takes "4GiB"); validated. Error(kInvalidArgument) names the setting.
EngineConfig engine_config_from_settings(const OptionMap& values);

}  // namespace optimate::python
