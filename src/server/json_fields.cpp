#include "server/json_fields.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <regex>
#include <string_view>

#include "server/api_error.h"

namespace optimate::server {

namespace {

const Json* find(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

const char* type_name(const Json& v) {
  return v.is_string() ? "a string" : v.is_boolean() ? "a boolean" : v.is_array() ? "an array"
       : v.is_object() ? "an object" : "a number";
}

// White space as Unicode defines it (Rust's char::is_whitespace, which pydantic strips), in UTF-8.
constexpr std::string_view kSpaces[] = {
    "\t", "\n", "\v", "\f", "\r", " ", "\u0085", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002",
    "\u2003", "\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a", "\u2028",
    "\u2029", "\u202f", "\u205f", "\u3000"};

std::string strip(std::string_view s) {
  for (bool stripped = true; stripped;) {
    stripped = false;
    for (std::string_view space : kSpaces) {
      if (s.starts_with(space)) {
        s.remove_prefix(space.size());
        stripped = true;
      }
      if (s.ends_with(space)) {
        s.remove_suffix(space.size());
        stripped = true;
      }
    }
  }
  return std::string(s);
}

std::string without_underscores(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  return s;
}

// pydantic's lax mode, which vLLM's request models validate in: a string holding a number
// counts as that number (surrounding white space and digit-group underscores allowed; an
// integer may end in ".0").
std::optional<std::string> integer_text(const std::string& text) {
  static const std::regex pattern(R"(([+-]?[0-9]+(?:_[0-9]+)*)(?:\.0+)?)");
  std::smatch m;
  std::string s = strip(text);
  if (!std::regex_match(s, m, pattern)) return std::nullopt;
  std::string digits = without_underscores(m[1].str());
  return digits[0] == '+' ? digits.substr(1) : digits;
}

std::optional<double> number_text(const std::string& text) {
  static const std::regex pattern(
      R"([+-]?(?:[0-9]+(?:_[0-9]+)*(?:\.(?:[0-9]+(?:_[0-9]+)*)?)?|\.[0-9]+(?:_[0-9]+)*)(?:[eE][+-]?[0-9]+)?)");
  static const std::regex special(R"([+-]?(?:inf|infinity|nan))", std::regex::icase);
  std::string s = strip(text);
  if (std::regex_match(s, special)) return s[0] == '-' ? -INFINITY : INFINITY;  // refused as not finite
  if (!std::regex_match(s, pattern)) return std::nullopt;
  return std::strtod(without_underscores(s).c_str(), nullptr);
}

}  // namespace

int64_t as_int(const Json& v, const std::string& name) {
  if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
  if (v.is_string()) {
    auto digits = integer_text(v.get<std::string>());
    if (!digits) bad_request(name, "{} must be an integer, got {}", name, v.dump());
    int64_t out = 0;
    auto [end, ec] = std::from_chars(digits->data(), digits->data() + digits->size(), out);
    if (ec != std::errc() || end != digits->data() + digits->size())
      bad_request(name, "{} is out of range: {}", name, *digits);
    return out;
  }
  // Unsigned first: is_number_integer() holds for unsigned values too, and 2^64 - 1 read as
  // int64 would be -1.
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      bad_request(name, "{} is out of range: {}", name, u);
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    // 2^63 is the first double past int64's range; -2^63 is where an integer below int64's
    // range rounds to as a double, so it is refused too (int64's least value as written is an
    // integer, not a double).
    if (!std::isfinite(d) || std::trunc(d) != d || d <= -9.2233720368547758e18 || d >= 9.2233720368547758e18)
      bad_request(name, "{} must be an integer, got {}", name, v.dump());
    return static_cast<int64_t>(d);
  }
  bad_request(name, "{} must be an integer, got {}", name, type_name(v));
}

std::optional<int64_t> get_int(const Json& object, const char* name) {
  const Json* v = find(object, name);
  if (!v) return std::nullopt;
  return as_int(*v, name);
}

double as_number(const Json& v, const std::string& name) {
  double d = 0;
  if (v.is_boolean()) {
    d = v.get<bool>() ? 1 : 0;
  } else if (v.is_string()) {
    auto parsed = number_text(v.get<std::string>());
    if (!parsed) bad_request(name, "{} must be a number, got {}", name, v.dump());
    d = *parsed;
  } else if (v.is_number()) {
    d = v.get<double>();
  } else {
    bad_request(name, "{} must be a number, got {}", name, type_name(v));
  }
  if (!std::isfinite(d)) bad_request(name, "{} must be finite", name);
  return d;
}

std::optional<double> get_number(const Json& object, const char* name) {
  const Json* v = find(object, name);
  if (!v) return std::nullopt;
  return as_number(*v, name);
}

std::optional<bool> get_bool(const Json& object, const char* name) {
  const Json* v = find(object, name);
  if (!v) return std::nullopt;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_number()) {
    double d = v->get<double>();
    if (d == 0 || d == 1) return d == 1;
    bad_request(name, "{} must be a boolean, got {}", name, v->dump());
  }
  if (v->is_string()) {
    std::string s = v->get<std::string>();
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    for (const char* yes : {"1", "on", "t", "true", "y", "yes"})
      if (s == yes) return true;
    for (const char* no : {"0", "off", "f", "false", "n", "no"})
      if (s == no) return false;
    bad_request(name, "{} must be a boolean, got {}", name, v->dump());
  }
  bad_request(name, "{} must be a boolean, got {}", name, type_name(*v));
}

std::optional<std::string> get_string(const Json& object, const char* name) {
  const Json* v = find(object, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad_request(name, "{} must be a string, got {}", name, type_name(*v));
  return v->get<std::string>();
}

std::vector<std::string> get_string_or_strings(const Json& object, const char* name) {
  const Json* v = find(object, name);
  if (!v) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array()) bad_request(name, "{} must be a string or a list of strings", name);
  std::vector<std::string> out;
  for (const auto& item : *v) {
    if (!item.is_string()) bad_request(name, "{} must be a string or a list of strings", name);
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::optional<std::vector<int64_t>> get_int_list(const Json& object, const char* name) {
  const Json* v = find(object, name);
  if (!v) return std::nullopt;
  if (!v->is_array()) bad_request(name, "{} must be a list of integers", name);
  std::vector<int64_t> out;
  out.reserve(v->size());
  for (const auto& item : *v) out.push_back(as_int(item, name));
  return out;
}

const Json* get_object(const Json& object, const char* name) {
  const Json* v = find(object, name);
  if (v && !v->is_object()) bad_request(name, "{} must be an object", name);
  return v;
}

}  // namespace optimate::server
