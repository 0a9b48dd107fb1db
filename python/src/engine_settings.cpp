#include "engine_settings.h"

#include <sstream>

#include <CLI/CLI.hpp>
#include <toml++/toml.h>

#include "config/engine_cli.h"
#include "core/error.h"

namespace optimate::python {
namespace {

std::string setting_name(const std::string& long_flag) {
  std::string name = long_flag;
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

}  // namespace

std::vector<EngineSetting> engine_settings() {
  const toml::table defaults = toml::parse(EngineConfig{}.to_toml());
  const toml::table& engine = *defaults["engine"].as_table();
  CLI::App app;
  EngineFlags flags;
  add_engine_flags(app, flags);
  std::vector<EngineSetting> out;
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_lnames().empty()) continue;
    const std::string& flag = option->get_lnames().front();
    const std::string name = setting_name(flag);
    const toml::node* node = engine.get(name);
    if (!node) continue;  // not a setting: --config, --optimizer, --print-config, --no-...
    EngineSetting s{name, "", {}, "--" + flag, option->get_description()};
    if (auto v = node->value_exact<std::string>()) s.type = "str", s.default_value = *v;
    else if (auto b = node->value_exact<bool>()) s.type = "bool", s.default_value = *b;
    else if (auto i = node->value_exact<int64_t>()) s.type = "int", s.default_value = *i;
    else if (auto d = node->value_exact<double>()) s.type = "float", s.default_value = *d;
    else fail(ErrorCode::kInternal, "engine setting {} has a default of no known type", name);
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
