// Parsing of the small value syntaxes that flags and TOML strings share.
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

#include "config/engine_config.h"
#include "core/error.h"

namespace optimate {
namespace {

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

OptionValue parse_value(const std::string& text) {
  if (text == "true") return true;
  if (text == "false") return false;
  char* end = nullptr;
  errno = 0;
  const long long i = std::strtoll(text.c_str(), &end, 10);
  if (!text.empty() && *end == '\0' && errno == 0) return static_cast<int64_t>(i);
  const double d = std::strtod(text.c_str(), &end);
  if (!text.empty() && *end == '\0' && std::isfinite(d)) return d;
  return text;
}

}  // namespace

int64_t parse_byte_size(std::string_view text, std::string_view what) {
  const std::string s = trim(text);
  char* end = nullptr;
  const double number = std::strtod(s.c_str(), &end);
  std::string unit = trim(end ? std::string_view(end) : std::string_view());
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0.0;
  if (unit.empty() || unit == "b") scale = 1.0;
  else if (unit == "k" || unit == "kb") scale = 1e3;
  else if (unit == "m" || unit == "mb") scale = 1e6;
  else if (unit == "g" || unit == "gb") scale = 1e9;
  else if (unit == "ki" || unit == "kib") scale = 1024.0;
  else if (unit == "mi" || unit == "mib") scale = 1024.0 * 1024.0;
  else if (unit == "gi" || unit == "gib") scale = 1024.0 * 1024.0 * 1024.0;
  else if (unit == "t" || unit == "tb") scale = 1e12;
  else if (unit == "ti" || unit == "tib") scale = 1024.0 * 1024.0 * 1024.0 * 1024.0;
  if (end == s.c_str() || scale == 0.0 || !std::isfinite(number) || number < 0 ||
      number * scale > 9e18)
    fail(ErrorCode::kInvalidArgument,
         "{} must be a size such as 4GiB, 512MiB or a byte count, got '{}'", std::string(what), s);
  return static_cast<int64_t>(number * scale);
}

OptimizerSpec parse_optimizer_flag(std::string_view text) {
  OptimizerSpec spec;
  const size_t colon = text.find(':');
  spec.name = trim(text.substr(0, colon));
  if (spec.name.empty())
    fail(ErrorCode::kInvalidArgument, "--optimizer needs a name, got '{}'", std::string(text));
  if (colon == std::string_view::npos) return spec;
  std::string_view rest = text.substr(colon + 1);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || trim(item.substr(0, eq)).empty())
      fail(ErrorCode::kInvalidArgument, "--optimizer {}: expected key=value, got '{}'", spec.name,
           std::string(item));
    const std::string key = trim(item.substr(0, eq));
    if (key == "enabled") {
      const OptionValue v = parse_value(trim(item.substr(eq + 1)));
      if (!std::holds_alternative<bool>(v))
        fail(ErrorCode::kInvalidArgument, "--optimizer {}: enabled must be true or false", spec.name);
      spec.enabled = std::get<bool>(v);
    } else {
      spec.options[key] = parse_value(trim(item.substr(eq + 1)));
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return spec;
}

}  // namespace optimate
