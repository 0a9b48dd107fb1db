// Everything an engine is built from: the model, the scheduler's limits, the KV cache size and
// the optimizers. Filled from defaults, then a TOML file ([engine] and [optimizers.NAME]
// tables), then command-line flags with vLLM's names; validate() names the bad field. The
// settings themselves are declared once, in engine_settings.def (config/settings.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/optimizer_options.h"
#include "core/priority_order.h"
#include "core/setting_choices.h"
#include "kv/host_tier.h"

namespace optimate {

struct EngineConfig {
  // One field per row of engine_settings.def, with its default.
#define SETTING(kind, type, field, key, flag, def, check, hot, help) type field = def;
#include "config/engine_settings.def"
#undef SETTING
  std::vector<OptimizerSpec> optimizers;

  // Throws Error(kInvalidArgument) naming the offending option.
  void validate() const;
  // The effective configuration as a TOML document (what --print-config shows); with
  // `only_changed`, the [engine] settings that differ from their defaults only.
  std::string to_toml(bool only_changed = false) const;
};

// Parses a TOML document onto `base` (keys absent from the document keep base's values).
// Unknown keys and wrong types are Error(kInvalidFile) naming `source` and the key.
EngineConfig parse_engine_config_toml(std::string_view text, const std::string& source,
                                      EngineConfig base = {});
EngineConfig load_engine_config_file(const std::string& path, EngineConfig base = {});
// No configuration is larger: a bigger file is refused unread.
inline constexpr size_t kMaxConfigFileBytes = size_t{16} << 20;

// An optimizer option as a TOML value.
std::string option_toml(const OptionValue& value);

// "4GiB", "512MiB", "1.5GB", "1048576": bytes. Error(kInvalidArgument) naming `what`.
int64_t parse_byte_size(std::string_view text, std::string_view what);
// A setting given in GiB (swap_space, host_prefix_cache_space), in bytes.
inline int64_t gib_bytes(double gib) { return static_cast<int64_t>(gib * 1073741824.0); }
// The host tier `config` asks for, in whole pages of `layout` (K and V of `num_layers` layers a
// slot): recompute reserves no swap space; `cap_bytes` (> 0) bounds the two regions together,
// each shrunk in proportion. A runner is built with this plan and the engine takes it from there.
kv::HostTierSlots plan_host_tier(const EngineConfig& config, int64_t num_layers, const kv::KvLayout& layout,
                                 int64_t cap_bytes = 0);
// "name" or "name:key=value,key=value"; values parse as bool, integer, float, else string.
OptimizerSpec parse_optimizer_flag(std::string_view text);

}  // namespace optimate
