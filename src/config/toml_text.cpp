#include "config/toml_text.h"

#include <charconv>

namespace optimate {

std::string toml_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string toml_double(double d) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), d);  // shortest form that reads back exactly
  std::string s(buf, r.ptr);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

}  // namespace optimate
