#include "metrics/prometheus_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <utility>

namespace optimate::metrics {

void append_value(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "NaN";
    return;
  }
  if (std::isinf(value)) {
    out += value > 0 ? "+Inf" : "-Inf";
    return;
  }
  if (value == 0.0) {  // also -0.0, which Prometheus treats as 0
    out += "0.0";
    return;
  }
  // Shortest round-trip digits come from to_chars in scientific form: "-d.ddde±XX".
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  bool negative = sci.front() == '-';
  if (negative) sci.remove_prefix(1);
  size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos))
    if (c != '.') digits += c;
  int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());

  if (negative) out += '-';
  if (exponent < -4 || exponent >= 6) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    out += exponent < 0 ? "e-" : "e+";
    int magnitude = std::abs(exponent);
    if (magnitude < 10) out += '0';
    out += std::to_string(magnitude);
  } else if (exponent < 0) {
    out += "0.";
    out.append(static_cast<size_t>(-exponent - 1), '0');
    out += digits;
  } else {
    size_t int_len = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= int_len) {
      out += digits;
      out.append(int_len - digits.size(), '0');
      out += ".0";
    } else {
      out.append(digits, 0, int_len);
      out += '.';
      out.append(digits, int_len, std::string::npos);
    }
  }
}

std::string format_value(double value) {
  std::string out;
  append_value(out, value);
  return out;
}

void append_escaped_help(std::string& out, std::string_view help) {
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
}

void append_escaped_label_value(std::string& out, std::string_view value) {
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '"') out += "\\\"";
    else out += c;
  }
}

void append_labels(std::string& out, const std::vector<std::string>& names,
                   const std::vector<std::string>& values, std::string_view extra_name,
                   std::string_view extra_value) {
  if (names.empty() && extra_name.empty()) return;
  // Sorted by label name, as the Python client writes them, so output compares byte for byte.
  std::vector<std::pair<std::string_view, std::string_view>> pairs;
  pairs.reserve(names.size() + 1);
  for (size_t i = 0; i < names.size(); ++i) pairs.emplace_back(names[i], values[i]);
  if (!extra_name.empty()) pairs.emplace_back(extra_name, extra_value);
  std::sort(pairs.begin(), pairs.end());
  out += '{';
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (i > 0) out += ',';
    out += pairs[i].first;
    out += "=\"";
    append_escaped_label_value(out, pairs[i].second);
    out += '"';
  }
  out += '}';
}

namespace {
bool is_alpha_(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
}  // namespace

bool is_valid_metric_name(std::string_view name) {
  if (name.empty() || !(is_alpha_(name[0]) || name[0] == ':')) return false;
  for (char c : name)
    if (!(is_alpha_(c) || is_digit(c) || c == ':')) return false;
  return true;
}

bool is_valid_label_name(std::string_view name) {
  if (name.empty() || !is_alpha_(name[0]) || name.starts_with("__")) return false;
  for (char c : name)
    if (!(is_alpha_(c) || is_digit(c))) return false;
  return true;
}

}  // namespace optimate::metrics
