#include "engine_settings.h"

#include <sstream>

#include <toml++/toml.h>

#include "config/engine_config.h"
#include "config/settings.h"
#include "core/error.h"

namespace optimate::python {
std::vector<EngineSetting> engine_settings() {
  std::vector<EngineSetting> out;
  for (const SettingInfo& info : optimate::engine_settings()) {
    // The default as the table writes it, read back as a typed TOML value.
    const toml::table parsed = toml::parse("value = " + info.default_toml);
    const toml::node& node = *parsed.get("value");
    EngineSetting s{std::string(info.key), "", {}, std::string(info.flag), std::string(info.help)};
    if (auto v = node.value_exact<std::string>()) s.type = "str", s.default_value = *v;
    else if (auto b = node.value_exact<bool>()) s.type = "bool", s.default_value = *b;
    else if (auto i = node.value_exact<int64_t>()) s.type = "int", s.default_value = *i;
    else if (auto d = node.value_exact<double>()) s.type = "float", s.default_value = *d;
    else fail(ErrorCode::kInternal, "engine setting {} has a default of no known type", info.key);
    out.push_back(std::move(s));
  }
  return out;
}

EngineConfig engine_config_from_settings(const OptionMap& values) {
  toml::table engine;
  for (const auto& [key, value] : values)
    std::visit([&, &key = key](const auto& v) { engine.insert_or_assign(key, v); }, value);
  toml::table root;
  root.insert("engine", std::move(engine));
  std::ostringstream text;
  text << root;
  try {
    EngineConfig config = parse_engine_config_toml(text.str(), "EngineArgs");
    config.validate();
    return config;
  } catch (const Error& e) {
    // The TOML reader words a wrong type as a bad file; here it is a bad argument.
    throw Error(ErrorCode::kInvalidArgument, e.what());
  }
}

}  // namespace optimate::python
