#include "config/settings.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "config/engine_config.h"
#include "config/setting_checks.h"
#include "config/toml_text.h"
#include "core/error.h"

namespace optimate {
namespace {

[[noreturn]] void bad_text(std::string_view where, const char* rule, std::string_view text) {
  fail(ErrorCode::kInvalidArgument, "{} must be {}, got '{}'", where, rule, text);
}

int64_t parse_int(std::string_view text, std::string_view where) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) bad_text(where, "an integer", text);
  return v;
}

template <typename T>
std::string format_value(SettingKind kind, const T& v) {
  if constexpr (std::is_same_v<T, std::string>) return toml_quote(v);
  else if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
  else if constexpr (std::is_same_v<T, double>) return toml_double(v);
  else if constexpr (Choice<T>) return toml_quote(choice_name(v));
  else return std::to_string(v);
}

template <typename T>
T parse_text(SettingKind kind, std::string_view text, std::string_view where) {
  if constexpr (std::is_same_v<T, std::string>) {
    return std::string(text);
  } else if constexpr (std::is_same_v<T, bool>) {
    if (text == "true" || text == "1") return true;
    if (text == "false" || text == "0") return false;
    bad_text(where, "true or false", text);
  } else if constexpr (std::is_same_v<T, double>) {
    const std::string s(text);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !std::isfinite(d)) bad_text(where, "a number", text);
    return d;
  } else if constexpr (Choice<T>) {
    return parse_choice<T>(text, where);
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    const int64_t v = parse_int(text, where);
    if (v < 0) bad_text(where, "a non-negative integer", text);
    return static_cast<uint64_t>(v);
  } else {
    if (kind == SettingKind::kBytes) return parse_byte_size(text, where);
    return parse_int(text, where);
  }
}

template <typename T>
SettingInfo make_setting(SettingKind kind, T EngineConfig::*member, std::string_view key,
                         std::string_view flag, T def, Check<T> check, bool hot, std::string_view help) {
  SettingInfo s;
  s.key = key;
  s.flag = flag;
  s.help = help;
  s.kind = kind;
  s.hot = hot;
  s.default_toml = format_value(kind, def);
  s.to_toml = [kind, member](const EngineConfig& c) { return format_value(kind, c.*member); };
  s.set_from_text = [kind, member](EngineConfig& c, std::string_view text, std::string_view where) {
    c.*member = parse_text<T>(kind, text, where);
  };
  s.copy = [member](EngineConfig& to, const EngineConfig& from) { to.*member = from.*member; };
  const std::string name(flag.substr(2));
  s.check = [kind, member, check, name](const EngineConfig& c) {
    if (!check.ok(c.*member))
      fail(ErrorCode::kInvalidArgument, "{} must be {}, got {}", name, check.rule, format_value(kind, c.*member));
  };
  return s;
}

// vLLM's --scheduling-policy: a value other than fcfs enables that optimizer.
SettingInfo optimizer_alias(std::string_view key, std::string_view flag, std::string_view help) {
  SettingInfo s;
  s.key = key;
  s.flag = flag;
  s.help = help;
  s.kind = SettingKind::kOptimizerAlias;
  s.default_toml = "\"fcfs\"";
  s.to_toml = [](const EngineConfig&) { return std::string(); };
  s.set_from_text = [](EngineConfig& c, std::string_view text, std::string_view where) {
    if (text.empty()) bad_text(where, "fcfs or an optimizer name", text);
    if (text == "fcfs") return;
    for (const auto& spec : c.optimizers)
      if (spec.name == text) return;
    c.optimizers.push_back(OptimizerSpec{std::string(text), {}});
  };
  s.check = [](const EngineConfig&) {};
  s.copy = [](EngineConfig&, const EngineConfig&) {};
  return s;
}

std::vector<SettingInfo> build_table() {
  return {
#define SETTING(kind, type, field, key, flag, def, check, hot, help) \
  make_setting<type>(SettingKind::kind, &EngineConfig::field, key, flag, type(def), check, hot, help),
#define ALIAS(key, flag, help) optimizer_alias(key, flag, help),
#include "config/engine_settings.def"
#undef SETTING
  };
}

}  // namespace

const std::vector<SettingInfo>& engine_settings() {
  static const std::vector<SettingInfo> table = build_table();
  return table;
}

const SettingInfo* find_setting(std::string_view key) {
  for (const SettingInfo& s : engine_settings())
    if (s.key == key) return &s;
  return nullptr;
}

std::string settings_markdown() {
  std::string out = "| TOML key | flag | default | at run time | meaning |\n|---|---|---|---|---|\n";
  for (const SettingInfo& s : engine_settings()) {
    std::string flag = fmt::format("`{}`", s.flag);
    if (s.kind == SettingKind::kBool) flag += fmt::format(" / `--no-{}`", s.flag.substr(2));
    out += fmt::format("| `{}` | {} | `{}` | {} | {} |\n", s.key, flag, s.default_toml,
                       s.hot ? "yes" : "restart", s.help);
  }
  return out;
}

}  // namespace optimate
