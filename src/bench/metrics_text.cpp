#include "bench/metrics_text.h"

#include <cstdlib>

namespace optimate::bench {

bool parse_metric_sample(std::string_view line, std::string& name, std::map<std::string, std::string>& labels,
                         double& value) {
  labels.clear();
  if (line.empty() || line.front() == '#') return false;
  const size_t brace = line.find('{');
  const size_t space = line.find(' ');
  if (space == std::string_view::npos) return false;
  size_t pos = 0;
  if (brace != std::string_view::npos && brace < space) {
    name = std::string(line.substr(0, brace));
    pos = brace + 1;
    while (pos < line.size() && line[pos] != '}') {
      const size_t eq = line.find('=', pos);
      if (eq == std::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') return false;
      std::string key(line.substr(pos, eq - pos)), v;
      size_t i = eq + 2;
      for (; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '\\' && i + 1 < line.size()) {
          ++i;
          v += line[i] == 'n' ? '\n' : line[i];
        } else {
          v += line[i];
        }
      }
      if (i >= line.size()) return false;
      labels[key] = v;
      pos = i + 1;
      if (pos < line.size() && line[pos] == ',') ++pos;
    }
    if (pos >= line.size()) return false;
    ++pos;  // '}'
  } else {
    name = std::string(line.substr(0, space));
    pos = space;
  }
  while (pos < line.size() && line[pos] == ' ') ++pos;
  const std::string number(line.substr(pos, line.find(' ', pos) - pos));
  char* end = nullptr;
  value = std::strtod(number.c_str(), &end);
  return end != number.c_str();
}

}  // namespace optimate::bench
