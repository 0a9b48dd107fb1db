// TOML reading of EngineConfig; the only file that includes toml++.
#include <algorithm>

#include <toml++/toml.h>

#include "config/engine_config.h"
#include "config/settings.h"
#include "config/toml_text.h"
#include "core/error.h"
#include "core/text_file.h"

namespace optimate {
namespace {

[[noreturn]] void bad_key(const std::string& source, const std::string& key, const char* rule) {
  fail(ErrorCode::kInvalidFile, "{}: {} must be {}", source, key, rule);
}

bool get_bool(const toml::node& node, const std::string& source, const std::string& key) {
  if (auto v = node.value_exact<bool>()) return *v;
  bad_key(source, key, "a boolean");
}

// The node as the text a command line would give, after checking its TOML type fits the kind.
std::string setting_text(const SettingInfo& s, const toml::node& node, const std::string& source,
                         const std::string& where) {
  switch (s.kind) {
    case SettingKind::kInt:
    case SettingKind::kSeed:
      if (auto v = node.value_exact<int64_t>()) return std::to_string(*v);
      bad_key(source, where, "an integer");
    case SettingKind::kDouble:
      if (auto v = node.value<double>()) return toml_double(*v);
      bad_key(source, where, "a number");
    case SettingKind::kBool:
      return get_bool(node, source, where) ? "true" : "false";
    case SettingKind::kBytes:
      if (auto v = node.value_exact<int64_t>()) return std::to_string(*v);
      if (auto v = node.value_exact<std::string>()) return *v;
      bad_key(source, where, "a size (\"4GiB\") or a byte count");
    case SettingKind::kString:
    case SettingKind::kChoice:
    case SettingKind::kOptimizerAlias:
      if (auto v = node.value_exact<std::string>()) return *v;
      bad_key(source, where, "a string");
  }
  bad_key(source, where, "a known kind");
}

void read_engine_table(const toml::table& table, const std::string& source, EngineConfig& c) {
  for (const auto& [k, node] : table) {
    const std::string key(k.str());
    const std::string where = "engine." + key;
    const SettingInfo* s = find_setting(key);
    if (!s) fail(ErrorCode::kInvalidFile, "{}: unknown key {}", source, where);
    try {
      s->set_from_text(c, setting_text(*s, node, source, where), where);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kInvalidFile) throw;
      fail(ErrorCode::kInvalidFile, "{}: {}", source, e.what());
    }
  }
}

OptimizerSpec read_optimizer_table(const std::string& name, const toml::table& table,
                                   const std::string& source) {
  OptimizerSpec spec;
  spec.name = name;
  for (const auto& [k, node] : table) {
    const std::string key(k.str());
    const std::string where = "optimizers." + name + "." + key;
    if (key == "enabled") { spec.enabled = get_bool(node, source, where); continue; }
    if (auto b = node.value_exact<bool>()) spec.options[key] = *b;
    else if (auto i = node.value_exact<int64_t>()) spec.options[key] = *i;
    else if (auto d = node.value_exact<double>()) spec.options[key] = *d;
    else if (auto s = node.value_exact<std::string>()) spec.options[key] = *s;
    else bad_key(source, where, "a boolean, number or string");
  }
  return spec;
}

// Anything but blank lines and comments.
bool has_toml_content(std::string_view text) {
  while (!text.empty()) {
    const size_t eol = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, eol);
    const size_t first = line.find_first_not_of(" \t\r");
    if (first != std::string_view::npos && line[first] != '#') return true;
    text.remove_prefix(std::min(eol + 1, text.size()));
  }
  return false;
}

}  // namespace

EngineConfig parse_engine_config_toml(std::string_view text, const std::string& source,
                                      EngineConfig base) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    fail(ErrorCode::kInvalidFile, "{}:{}:{}: {}", source, e.source().begin.line,
         e.source().begin.column, std::string(e.description()));
  }
  EngineConfig c = std::move(base);
  for (const auto& [k, node] : root) {
    const std::string key(k.str());
    if (key == "engine") {
      if (!node.is_table()) bad_key(source, "engine", "a table");
      read_engine_table(*node.as_table(), source, c);
    } else if (key == "optimizers") {
      if (!node.is_table()) bad_key(source, "optimizers", "a table of [optimizers.NAME] tables");
      for (const auto& [name, opt] : *node.as_table()) {
        const std::string n(name.str());
        if (!opt.is_table()) bad_key(source, "optimizers." + n, "a table");
        OptimizerSpec spec = read_optimizer_table(n, *opt.as_table(), source);
        // A TOML table replaces an optimizer of the same name from an earlier layer.
        std::erase_if(c.optimizers, [&](const OptimizerSpec& o) { return o.name == n; });
        c.optimizers.push_back(std::move(spec));
      }
    } else if (key == "bench") {
      // A benchmark scenario's label and description (`optimate bench --compare`): the same file
      // serves as an engine configuration, so the engine accepts the table and leaves it alone.
      if (!node.is_table()) bad_key(source, "bench", "a table");
    } else {
      fail(ErrorCode::kInvalidFile, "{}: unknown table or key '{}' (expected [engine], "
           "[optimizers.NAME] or [bench])", source, key);
    }
  }
  return c;
}

EngineConfig load_engine_config_file(const std::string& path, EngineConfig base) {
  const std::string text = read_regular_file(path, "config file " + path, kMaxConfigFileBytes);
  // An empty file is a file caught mid-write or truncated by mistake far more often than a
  // wish for every default: it is refused like any broken file.
  if (!has_toml_content(text))
    fail(ErrorCode::kInvalidFile, "config file {} is empty (write an empty [engine] table to mean the defaults)",
         path);
  return parse_engine_config_toml(text, path, std::move(base));
}

}  // namespace optimate
